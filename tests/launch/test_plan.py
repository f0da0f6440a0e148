"""Launch planning: precedence with provenance, contradictions, ignored flags, ports, the command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from accelerate.config.config_file import ConfigLocation, LaunchConfig
from accelerate.launch.plan import LaunchError, LaunchPlan, build_plan

CONFIG_PATH = Path("/cfg/default_config.yaml")


def plan(flags: dict[str, Any] | None = None, config: LaunchConfig | None = None, env: dict[str, str] | None = None,
         busy: tuple[int, ...] = (), gpus: int = 0, **kwargs: Any) -> LaunchPlan:  # fmt: skip
    return build_plan(
        script="train.py",
        script_args=["--lr", "1"],
        flags=flags,
        config=config,
        config_location=ConfigLocation(CONFIG_PATH, "default") if config else None,
        environ=env or {},
        gpu_count=lambda: gpus,
        check_port=lambda port: port not in busy,
        **kwargs,
    )


def test_config_then_environment_then_flags() -> None:
    config = LaunchConfig(mixed_precision="fp16", num_processes=2, use_cpu=True, debug=True)
    p = plan({"num_processes": 4}, config, {"ACCELERATE_MIXED_PRECISION": "bf16"})
    assert (p.value("mixed_precision"), p.settings["mixed_precision"].source) == (
        "bf16",
        "environment ACCELERATE_MIXED_PRECISION",
    )
    assert (p.value("num_processes"), p.settings["num_processes"].source) == (4, "flag --num_processes")
    assert p.settings["debug"].source == f"config file {CONFIG_PATH}"
    assert p.settings["max_restarts"].source == "default"
    assert p.child_env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    assert p.child_env["ACCELERATE_USE_CPU"] == "true"
    assert p.child_env["OMP_NUM_THREADS"] == "1"
    assert p.mode == "torchrun"
    report = p.describe()
    assert "flag --num_processes" in report and "environment ACCELERATE_MIXED_PRECISION" in report
    assert "torch.distributed.run" in report and "--nproc_per_node 4" in report


def test_single_process_runs_in_a_child_with_the_bootstrap() -> None:
    p = plan()
    assert p.mode == "single"
    assert p.command[-4:] == ["accelerate.launch.bootstrap", "train.py", "--lr", "1"]
    assert "OMP_NUM_THREADS" not in p.child_env
    assert plan(module=True).command[-4:] == ["-m", "train.py", "--lr", "1"]


def test_default_process_count_uses_visible_gpus() -> None:
    assert plan(gpus=4).value("num_processes") == 4
    assert plan({"cpu": True}, gpus=4).value("num_processes") == 1
    assert plan({"gpu_ids": "0,1"}, gpus=4).child_env["CUDA_VISIBLE_DEVICES"] == "0,1"


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        ({"cpu": True, "multi_gpu": True}, ("--cpu", "--multi_gpu")),
        ({"cpu": True, "gpu_ids": "0"}, ("--cpu", "--gpu_ids")),
        ({"num_processes": 3, "num_machines": 2}, ("num_processes=3", "num_machines=2")),
        ({"num_machines": 2, "machine_rank": 2, "num_processes": 2}, ("machine_rank=2", "num_machines=2")),
    ],
)
def test_contradictions_name_both(flags: dict[str, Any], names: tuple[str, str]) -> None:
    with pytest.raises(LaunchError) as info:
        plan(flags)
    assert all(name in str(info.value) for name in names), str(info.value)


def test_module_and_no_python_contradict() -> None:
    with pytest.raises(LaunchError, match="--module and --no_python"):
        plan(module=True, no_python=True)


@pytest.mark.parametrize("flag", ["main_process_port", "rdzv_backend", "max_restarts", "same_network"])
def test_flags_a_single_process_ignores_are_errors(flag: str) -> None:
    value = {"main_process_port": 29501, "rdzv_backend": "c10d", "max_restarts": 1, "same_network": True}[
        flag
    ]
    with pytest.raises(LaunchError, match=f"--{flag} has no effect.*num_processes=1"):
        plan({flag: value})


def test_same_network_needs_several_machines() -> None:
    with pytest.raises(LaunchError, match="--same_network has no effect.*num_machines=1"):
        plan({"num_processes": 2, "cpu": True, "same_network": True})
    # From a config file the same key is fine: upstream writes it into every file.
    plan({"num_processes": 2, "cpu": True}, LaunchConfig(same_network=True))


def test_unavailable_backends_are_refused() -> None:
    with pytest.raises(LaunchError, match="DeepSpeed's own multi-machine launcher"):
        plan({"use_deepspeed": True, "deepspeed_hostfile": "hosts"})
    with pytest.raises(LaunchError, match="distributed_type: MEGATRON_LM"):
        plan(config=LaunchConfig(distributed_type="MEGATRON_LM"))
    with pytest.raises(LaunchError, match="mpirun_hostfile"):
        plan(config=LaunchConfig(mpirun_config={"mpirun_hostfile": "/etc/hosts"}))
    # config < env < flags: a flag replaces the config file's fp8 (fp8 itself runs: tests/launch/test_fp8.py).
    assert (
        plan({"mixed_precision": "bf16"}, LaunchConfig(mixed_precision="fp8")).value("mixed_precision")
        == "bf16"
    )


def test_unknown_rendezvous_backend_is_refused() -> None:
    with pytest.raises(LaunchError, match="rdzv_backend='etcdv9'"):
        plan({"num_processes": 2, "cpu": True, "rdzv_backend": "etcdv9"})


def test_port_zero_across_machines_is_refused() -> None:
    with pytest.raises(LaunchError, match="main_process_port=0"):
        plan({"num_processes": 2, "num_machines": 2, "machine_rank": 0, "main_process_port": 0, "cpu": True})


def test_ports() -> None:
    # A busy default port on one machine: another one is chosen and the plan says so.
    p = plan({"num_processes": 2, "cpu": True}, busy=(29500,))
    assert p.value("main_process_port") != 29500 and "free port" in p.settings["main_process_port"].source
    with pytest.raises(LaunchError, match="main_process_port=29600 .*flag --main_process_port.* in use"):
        plan({"num_processes": 2, "cpu": True, "main_process_port": 29600}, busy=(29600,))
    # A dry run starts nothing: the busy port it was given is a warning, and a busy default is still
    # replaced by a free port, as the launch would do.
    p = plan({"num_processes": 2, "cpu": True, "main_process_port": 29600}, busy=(29600,), dry_run=True)
    assert p.value("main_process_port") == 29600
    assert [w for w in p.warnings if w.startswith("main_process_port=29600 (from flag --main_process_port)")]
    p = plan({"num_processes": 2, "cpu": True}, busy=(29500,), dry_run=True)
    assert p.value("main_process_port") != 29500 and "free port" in p.settings["main_process_port"].source
    assert not p.warnings
    # Machine 1 connects to machine 0's port, so a busy port there is expected.
    two = {"num_processes": 2, "num_machines": 2, "cpu": True, "main_process_ip": "127.0.0.1"}
    p = plan({**two, "machine_rank": 1, "main_process_port": 29600}, busy=(29600,))
    assert (
        "--node_rank" in p.torchrun_args and p.torchrun_args[p.torchrun_args.index("--node_rank") + 1] == "1"
    )
    with pytest.raises(LaunchError, match="needs the address of machine 0"):
        plan({**two, "machine_rank": 1, "main_process_ip": None})


def test_c10d_rendezvous_gets_an_endpoint() -> None:
    p = plan({"num_processes": 2, "cpu": True, "rdzv_backend": "c10d", "main_process_port": 29700})
    args = p.torchrun_args
    assert args[args.index("--rdzv_endpoint") + 1] == "127.0.0.1:29700"
    # On one machine the launcher hosts the store itself: a port another run took is an error, not
    # that run's store joined by mistake.
    assert args[args.index("--rdzv_conf") + 1] == "is_host=1"
    conf = plan({"num_processes": 2, "cpu": True, "max_restarts": 1, "rdzv_conf": "join_timeout=9"})
    assert conf.torchrun_args[conf.torchrun_args.index("--rdzv_conf") + 1] == "join_timeout=9,is_host=1"
    static = plan({"num_processes": 2, "cpu": True})
    assert "--rdzv_conf" not in static.torchrun_args


def test_user_thread_count_wins() -> None:
    assert (
        "OMP_NUM_THREADS"
        not in plan({"num_processes": 2, "cpu": True}, env={"OMP_NUM_THREADS": "2"}).child_env
    )
    assert (
        plan({"num_processes": 2, "cpu": True, "num_cpu_threads_per_process": 3}).child_env["OMP_NUM_THREADS"]
        == "3"
    )


@pytest.mark.parametrize(
    ("flags", "config", "named", "procs"),
    [
        ({"multi_gpu": True, "num_processes": 2}, None, "--multi_gpu", 2),
        ({"gpu_ids": "0,1"}, None, "--gpu_ids 0,1", 2),
        ({}, LaunchConfig(distributed_type="MULTI_GPU", num_processes=2, gpu_ids="all"),
         f"distributed_type: MULTI_GPU (from config file {CONFIG_PATH})", 2),
        ({}, LaunchConfig(distributed_type="MULTI_GPU", num_processes=2, gpu_ids="0,1"),
         f"distributed_type: MULTI_GPU (from config file {CONFIG_PATH}) and gpu_ids: 0,1", 2),
    ],
)  # fmt: skip
def test_gpus_asked_for_without_a_gpu_run_on_cpu_with_one_warning(
    flags: dict[str, Any], config: LaunchConfig | None, named: str, procs: int
) -> None:
    p = plan(flags, config, gpus=0)
    assert len(p.warnings) == 1 and p.warnings[0].startswith(f"{named}")
    assert f"no GPU is visible on this machine; running {procs} CPU processes instead." in p.warnings[0]
    assert (p.value("num_processes"), p.value("cpu"), p.mode) == (procs, True, "torchrun")
    assert p.child_env["ACCELERATE_USE_CPU"] == "true" and "CUDA_VISIBLE_DEVICES" not in p.child_env
    assert f"Warning: {p.warnings[0]}" in p.describe()  # --dry_run says the same
    # With GPUs there, nothing to say.
    assert plan(flags, config, gpus=2).warnings == []


def test_one_process_on_one_gpu_id_without_a_gpu_warns_too() -> None:
    p = plan({"gpu_ids": "0"}, gpus=0)
    assert p.mode == "single" and p.warnings == [
        "--gpu_ids 0 asks for GPUs, but no GPU is visible on this machine; running 1 CPU process instead."
    ]
