"""The XLA backend's parts that run without torch_xla: its bf16 switches, its strategy's set-up, its faces.

Training on an XLA device is tested on torch_xla's CPU device in tests/xla (`make test-xla`).
"""

from __future__ import annotations

import os

import pytest
import torch

from accelerate.backends.xla import XLAStrategy, apply_bf16_env, bf16_env

_SWITCHES = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")


@pytest.fixture
def no_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _SWITCHES:
        monkeypatch.setenv(name, "x")  # recorded, so the variables the test sets are removed after it
        monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("mode", "downcast", "expected"),
    [
        ("bf16", False, {"XLA_USE_BF16": "1"}),
        ("bf16", True, {"XLA_DOWNCAST_BF16": "1"}),
        ("fp16", False, {}),
        ("no", True, {}),
        (None, False, {}),
    ],
)
def test_bf16_env_names_torch_xlas_switch(mode: str | None, downcast: bool, expected: dict[str, str]) -> None:
    assert bf16_env(mode, downcast) == expected


@pytest.mark.usefixtures("no_switches")
def test_apply_bf16_env_keeps_a_value_already_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XLA_USE_BF16", "0")
    apply_bf16_env("bf16", downcast_bf16=False)
    assert os.environ["XLA_USE_BF16"] == "0"
    apply_bf16_env("bf16", downcast_bf16=True)
    assert os.environ["XLA_DOWNCAST_BF16"] == "1"


@pytest.mark.usefixtures("no_switches")
def test_the_strategy_sets_the_bf16_switch_when_built() -> None:
    # Built here on a CPU device only to check its set-up: nothing at construction needs torch_xla.
    strategy = XLAStrategy(torch.device("cpu"), 1, mixed_precision="bf16", downcast_bf16=True)
    assert strategy.name == "xla" and strategy.loader_moves_batches
    assert os.environ.get("XLA_DOWNCAST_BF16") == "1" and "XLA_USE_BF16" not in os.environ
    XLAStrategy(torch.device("cpu"), 1)  # mixed_precision "no": no switch
    assert "XLA_USE_BF16" not in os.environ


def test_upstreams_path_names_the_backends_loader() -> None:
    from accelerate.backends.xla.loader import MpDeviceLoaderWrapper
    from accelerate.data_loader import MpDeviceLoaderWrapper as at_upstream_path

    assert at_upstream_path is MpDeviceLoaderWrapper


def test_the_strategy_writes_checkpoints_through_its_own_io(monkeypatch: pytest.MonkeyPatch) -> None:
    """checkpointing/ knows no XLA: the strategy's CheckpointIO copies tensors to CPU (as xm.save)."""
    from accelerate.backends.xla import XlaCheckpointIO
    from accelerate.backends.xla import checkpoint_io as xla_io

    io = XLAStrategy(torch.device("cpu"), 1).checkpoint_io()
    assert isinstance(io, XlaCheckpointIO)
    state = {"w": torch.zeros(2)}
    assert io.host_copy(state) is state  # no torch_xla loaded: no XLA tensor, nothing copied
    monkeypatch.setattr(xla_io, "xla_to_cpu", lambda obj: ("copied", obj))
    assert io.host_copy(state) == ("copied", state)
