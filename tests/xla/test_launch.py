"""`accelerate launch --tpu`, `notebook_launcher` and `accelerate tpu-config` where torch_xla is installed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("torch_xla", reason="needs torch_xla (make test-xla)")

from accelerate.launch.checks import LaunchError  # noqa: E402
from accelerate.launch.plan import build_plan  # noqa: E402
from tests.commands.helpers import run_cli  # noqa: E402

SCRIPT = str(Path(__file__).resolve().parent / "scripts" / "tpu_main.py")

if os.environ.get("PJRT_DEVICE") is None:
    pytest.skip(
        "set PJRT_DEVICE=CPU (make test-xla does) to run on torch_xla's CPU device", allow_module_level=True
    )


def test_launch_tpu_runs_main_on_one_xla_device(tmp_path: Path) -> None:
    result = run_cli(
        "launch", "--tpu", "--num_processes", "1", SCRIPT, "--steps", "2", home=tmp_path, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "XLA-RUN XLA xla:0 1 2 no" in result.stdout


def test_launch_tpu_calls_the_named_function(tmp_path: Path) -> None:
    result = run_cli("launch", "--tpu", "--main_training_function", "other_entry", SCRIPT, "--x", "1", home=tmp_path,
                     timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OTHER-ENTRY ['--x', '1']" in result.stdout


def test_a_missing_function_is_named(tmp_path: Path) -> None:
    result = run_cli(
        "launch", "--tpu", "--main_training_function", "nope", SCRIPT, home=tmp_path, timeout=300
    )
    assert result.returncode != 0
    assert "has no function nope()" in result.stderr


def test_config_file_distributed_type_xla_plans_a_tpu_launch(tmp_path: Path) -> None:
    config = tmp_path / "tpu.yaml"
    config.write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: XLA\nmixed_precision: bf16\nnum_processes: 1\n"
        "downcast_bf16: 'yes'\nmain_training_function: main\ntpu_name: pod\ntpu_zone: zone\n"
        "tpu_use_cluster: false\ntpu_use_sudo: false\n"
    )
    result = run_cli("launch", "--config_file", str(config), "--dry_run", SCRIPT, home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Command (torch_xla spawn):" in result.stdout and "accelerate.launch.xla_spawn" in result.stdout
    assert "XLA_DOWNCAST_BF16=1" in result.stdout and "XLA_USE_BF16" not in result.stdout


def test_torchrun_flags_are_refused_on_a_tpu_launch() -> None:
    with pytest.raises(LaunchError, match="--main_process_port has no effect on a TPU launch"):
        build_plan(script=SCRIPT, flags={"tpu": True, "main_process_port": 1234}, environ={}, check_port=None)
    with pytest.raises(LaunchError, match="contradicts tpu"):
        build_plan(script=SCRIPT, flags={"tpu": True, "cpu": True}, environ={}, check_port=None)
    with pytest.raises(LaunchError, match="TPU pod"):
        build_plan(script=SCRIPT, flags={"tpu": True, "tpu_use_sudo": True}, environ={}, check_port=None)


def test_notebook_launcher_runs_on_the_xla_device(capsys: pytest.CaptureFixture[str]) -> None:
    from accelerate import Accelerator, notebook_launcher

    def training_function(scale: int) -> str:
        accelerator = Accelerator()
        return f"{accelerator.device.type}:{accelerator.distributed_type.value}:{scale}"

    assert notebook_launcher(training_function, args=(3,), num_processes=1) == "xla:XLA:3"
    assert "Launching a training on 1 TPU core." in capsys.readouterr().out


def test_notebook_launcher_refuses_an_accelerator_made_before() -> None:
    from accelerate import Accelerator, notebook_launcher

    Accelerator()
    with pytest.raises(RuntimeError, match="Accelerator must be created only inside your training function"):
        notebook_launcher(lambda: None, num_processes=1)
