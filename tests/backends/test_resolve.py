from __future__ import annotations

import pytest
import torch

from accelerate.backends.ddp import DDPStrategy
from accelerate.backends.resolve import resolve_mixed_precision, resolve_strategy
from accelerate.backends.single_device import SingleDeviceStrategy
from accelerate.state import PartialState


def test_single_process_gets_single_device_strategy() -> None:
    assert isinstance(resolve_strategy(PartialState()), SingleDeviceStrategy)


@pytest.mark.parametrize(
    ("requested", "launched", "expected"),
    [(None, None, "no"), (None, "bf16", "bf16"), ("fp16", "bf16", "fp16"), ("BF16", None, "bf16")],
)
def test_mixed_precision_resolution(requested: str | None, launched: str | None, expected: str) -> None:
    assert resolve_mixed_precision(requested, launched, torch.device("cpu")) == expected


def test_bad_mixed_precision_values() -> None:
    with pytest.raises(ValueError, match="'no', 'fp16', 'bf16'"):
        resolve_mixed_precision("fp32", None, torch.device("cpu"))
    assert resolve_mixed_precision("fp8", None, torch.device("cpu")) == "fp8"  # runs through torchao here


def test_ddp_leaves_frozen_modules_unwrapped() -> None:
    strategy = DDPStrategy(torch.device("cpu"), PartialState().distributed_type)
    frozen = torch.nn.Linear(2, 2).requires_grad_(False)
    assert strategy.setup_module(frozen, device_placement=True) is frozen
