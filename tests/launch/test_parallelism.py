"""The launcher's N-D parallelism: flags and config section -> checks -> the children's variables, and the
mesh `--dry_run` prints (pure arithmetic, checked against torch's own layout of ranks)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

from accelerate.config.config_file import LaunchConfig
from accelerate.launch.parallelism import MESH_DIMS, mesh_coordinates
from accelerate.launch.plan import LaunchError, LaunchPlan
from tests.launch.test_plan import plan

ON = {"use_parallelism_config": True}


def cpu_plan(procs: int, config: LaunchConfig | None = None, **flags: Any) -> LaunchPlan:
    return plan({"cpu": True, "num_processes": procs, **flags}, config)


def test_flags_become_upstreams_variables() -> None:
    p = cpu_plan(4, **ON, parallelism_config_dp_shard_size=2, parallelism_config_tp_size=2)
    env = p.child_env
    assert env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true"
    sizes = {dim: env[f"PARALLELISM_CONFIG_{dim.upper()}_SIZE"] for dim in MESH_DIMS}
    assert sizes == {"dp_replicate": "1", "dp_shard": "2", "cp": "1", "sp": "1", "tp": "2"}
    assert (
        env["PARALLELISM_CONFIG_CP_BACKEND"] == "torch"
        and env["PARALLELISM_CONFIG_SP_BACKEND"] == "deepspeed"
    )
    # options of a dimension of size 1 stay out (a handler for it would make ParallelismConfig warn)
    assert (
        "PARALLELISM_CONFIG_CP_COMM_STRATEGY" not in env
        and "PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION" not in env
    )
    assert p.settings["parallelism_config_tp_size"].source == "flag --parallelism_config_tp_size"
    assert p.settings["parallelism_config_dp_replicate_size"].source == "default"


def test_nothing_is_written_without_the_switch() -> None:
    env = cpu_plan(2).child_env
    assert not any(
        k.startswith("PARALLELISM_CONFIG_") or k == "ACCELERATE_USE_PARALLELISM_CONFIG" for k in env
    )


def test_a_size_flag_without_the_switch_is_refused_by_name() -> None:
    with pytest.raises(LaunchError, match="--parallelism_config_tp_size .*--use_parallelism_config is off"):
        cpu_plan(2, parallelism_config_tp_size=2)


def test_the_config_file_section_turns_it_on_and_flags_win() -> None:
    config = LaunchConfig(use_cpu=True, num_processes=4, parallelism_config={
        "parallelism_config_dp_replicate_size": 2, "parallelism_config_tp_size": 2})  # fmt: skip
    p = plan({}, config)
    assert (
        p.child_env["PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] == "2"
        and p.child_env["PARALLELISM_CONFIG_TP_SIZE"] == "2"
    )
    assert p.settings["use_parallelism_config"].source.startswith("config file")
    p = plan({"parallelism_config_tp_size": 1, "parallelism_config_dp_shard_size": 2}, config)
    assert (
        p.child_env["PARALLELISM_CONFIG_TP_SIZE"] == "1"
        and p.child_env["PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "2"
    )


def test_sizes_must_multiply_to_the_process_count() -> None:
    with pytest.raises(LaunchError) as caught:
        cpu_plan(4, **ON, parallelism_config_tp_size=2, parallelism_config_dp_replicate_size=3)
    message = str(caught.value)
    assert "multiply to 6 processes" in message and "num_processes=4 (from flag --num_processes)" in message
    assert "dp_replicate=3" in message and "tp=2" in message and "dp_shard=1" in message


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        ({"parallelism_config_cp_size": 2}, "no CPU kernel"),
        ({"parallelism_config_tp_size": 0, "parallelism_config_dp_shard_size": 2}, "at least 1"),
        ({"parallelism_config_tp_size": 2, "use_deepspeed": True}, "not with DeepSpeed"),
        (
            {"parallelism_config_sp_size": 2, "parallelism_config_tp_size": 2},
            "both split the attention heads",
        ),
        (
            {"parallelism_config_sp_size": 2, "parallelism_config_sp_backend": "deepspeed"},
            "sp_backend=deepspeed \\(from flag.*DeepSpeed is off.*sp_backend torch",
        ),
        ({"parallelism_config_sp_size": 2, "parallelism_config_sp_backend": "ring"}, "deepspeed, torch"),
        (
            {"parallelism_config_tp_size": 2, "parallelism_config_cp_comm_strategy": "ring"},
            "allgather, alltoall",
        ),
    ],
)
def test_bad_input_is_refused_before_anything_starts(flags: dict[str, Any], match: str) -> None:
    with pytest.raises(LaunchError, match=match):
        cpu_plan(2, **ON, **flags)


def test_context_parallel_runs_on_gpus_with_its_options() -> None:
    p = plan({"num_processes": 2, **ON, "parallelism_config_cp_size": 2}, gpus=2)
    assert p.child_env["PARALLELISM_CONFIG_CP_SIZE"] == "2"
    assert p.child_env["PARALLELISM_CONFIG_CP_COMM_STRATEGY"] == "allgather"


def test_context_parallel_is_refused_when_no_gpu_is_visible() -> None:
    # --multi_gpu on a machine without GPUs falls back to CPU processes: cp then has no kernel.
    with pytest.raises(LaunchError, match="cpu=True, from default \\(no GPU visible\\)"):
        plan({"multi_gpu": True, "num_processes": 2, **ON, "parallelism_config_cp_size": 2}, gpus=0)


@pytest.mark.parametrize("shape", [(1, 2, 1, 1, 2), (2, 2, 1, 1, 1), (2, 1, 2, 1, 2), (1, 1, 1, 3, 2)])
def test_mesh_coordinates_are_torchs_row_major_layout(shape: tuple[int, ...]) -> None:
    named = dict(zip(MESH_DIMS, shape, strict=True))
    # init_device_mesh lays ranks out as arange(world).view(shape): the coordinates of rank r there.
    grid = torch.arange(int(torch.tensor(shape).prod())).view(shape)
    for index in itertools.product(*(range(n) for n in shape)):
        rank = int(grid[index])
        assert mesh_coordinates(named, rank) == dict(zip(MESH_DIMS, index, strict=True))
    with pytest.raises(ValueError, match="outside a mesh"):
        mesh_coordinates(named, grid.numel())


def test_dry_run_prints_the_mesh_and_each_process_coordinates() -> None:
    text = cpu_plan(4, **ON, parallelism_config_dp_shard_size=2, parallelism_config_tp_size=2).describe()
    lines = text.splitlines()
    start = lines.index("Device mesh (ParallelismConfig, outermost dimension first):")
    assert "dp_replicate=1  dp_shard=2  cp=1  sp=1  tp=2  ->  mesh dims: dp_shard, tp" in lines[start + 1]
    table = [line.split() for line in lines[start + 2 : start + 7]]
    assert table[0] == ["rank", "dp_replicate", "dp_shard", "cp", "tp", "dp", "rank"]
    assert [row[1:5] for row in table[1:]] == [["0", "0", "0", "0"], ["0", "0", "0", "1"], ["0", "1", "0", "0"],
                                               ["0", "1", "0", "1"]]  # fmt: skip
    assert [row[5] for row in table[1:]] == ["0", "0", "1", "1"]  # the TP pair of a dp rank reads one batch
    assert "Device mesh" not in cpu_plan(2).describe()


def test_dry_run_names_the_machine_of_each_process() -> None:
    p = plan({"cpu": True, "num_processes": 4, "num_machines": 2, "main_process_ip": "10.0.0.1", **ON,
              "parallelism_config_dp_replicate_size": 2, "parallelism_config_tp_size": 2})  # fmt: skip
    rows = [line.split() for line in p.describe().splitlines() if line.strip().startswith(("rank", "2 "))]
    assert rows[0][:2] == ["rank", "machine"] and rows[1][:3] == ["2", "1", "1"]


def test_sequence_parallelism_runs_natively_on_cpu_from_the_flag_or_the_config_file() -> None:
    p = cpu_plan(2, **ON, parallelism_config_sp_size=2)
    assert p.child_env["PARALLELISM_CONFIG_SP_SIZE"] == "2"
    assert p.child_env["PARALLELISM_CONFIG_SP_BACKEND"] == "torch"  # unset: follows the engine (no DeepSpeed)
    assert p.settings["parallelism_config_sp_backend"].source == "default (follows use_deepspeed)"
    config = LaunchConfig(use_cpu=True, num_processes=4, parallelism_config={
        "parallelism_config_dp_shard_size": 2, "parallelism_config_sp_size": 2})  # fmt: skip
    p = plan({}, config)
    assert (
        p.child_env["PARALLELISM_CONFIG_SP_SIZE"] == "2"
        and p.child_env["PARALLELISM_CONFIG_SP_BACKEND"] == "torch"
    )
    assert "dp_replicate=1  dp_shard=2  cp=1  sp=2  tp=1  ->  mesh dims: dp_shard, sp" in p.describe()
