"""Where torch_xla is not installed (this environment, CI), everything XLA says so clearly.

The XLA backend itself is tested on torch_xla's CPU device in tests/xla (`make test-xla`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from accelerate import Accelerator, DistributedType, GradientState
from accelerate.launch.checks import LaunchError
from accelerate.launch.plan import build_plan
from accelerate.state.xla import xla_requested
from accelerate.utils import install_xla, is_torch_xla_available
from accelerate.utils.xla import require_torch_xla, xla_to_cpu
from tests.commands.helpers import run_cli

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch_xla") is not None, reason="torch_xla is installed"
)


def test_probes_are_false_and_nothing_runs_on_xla() -> None:
    assert not is_torch_xla_available() and not is_torch_xla_available(check_is_tpu=True)
    assert not xla_requested()
    accelerator = Accelerator()
    assert accelerator.distributed_type == DistributedType.NO and accelerator.device.type == "cpu"
    assert type(accelerator.strategy).__name__ == "SingleDeviceStrategy"
    assert GradientState().is_xla_gradients_synced is False


def test_xla_to_cpu_leaves_objects_alone_without_torch_xla() -> None:
    state = {"w": torch.ones(2), "nested": [torch.zeros(1)]}
    assert xla_to_cpu(state) is state


def test_the_install_hint_is_named() -> None:
    with pytest.raises(ImportError, match="pip install torch_xla"):
        require_torch_xla("Training on TPU")
    with pytest.raises(
        RuntimeError, match=r"only in a Colab or Kaggle notebook.*pip install torch_xla\[tpu\]~="
    ):
        install_xla()


def test_launch_tpu_names_the_pip_command(tmp_path: Path) -> None:
    result = run_cli("launch", "--tpu", "--dry_run", "train.py", home=tmp_path)
    assert result.returncode == 2
    assert (
        "--tpu: TPU/XLA runs through torch_xla" in result.stderr and "pip install torch_xla" in result.stderr
    )


def test_a_config_file_asking_for_xla_names_the_pip_command() -> None:
    from accelerate.config.config_file import LaunchConfig

    with pytest.raises(
        LaunchError, match=r"distributed_type: XLA \(from the config file .*\).*pip install torch_xla"
    ):
        build_plan(script="train.py", config=LaunchConfig(distributed_type="XLA"), environ={}, check_port=None,
                   config_location=None)  # fmt: skip


def test_tpu_tuning_flags_without_tpu_name_the_switch() -> None:
    with pytest.raises(LaunchError, match=r"--downcast_bf16 configures a feature that is off \(no --tpu\)"):
        build_plan(script="train.py", flags={"downcast_bf16": True}, environ={}, check_port=None)
