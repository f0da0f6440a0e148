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


def test_two_rows_asked_by_arguments_that_conflict_raise_naming_both() -> None:
    from accelerate.backends.resolve import backend_request
    from accelerate.config.env import LaunchEnv

    with pytest.raises(ValueError, match=r"both fsdp_plugin \(FSDP\) and deepspeed_plugins \(DeepSpeed\)"):
        backend_request({"fsdp_plugin": object(), "deepspeed_plugins": {"a": object()}}, LaunchEnv())


def test_a_row_asked_only_by_the_launcher_steps_aside_for_an_argument() -> None:
    from accelerate.backends.resolve import asked_rows
    from accelerate.backends.spec import BackendRequest
    from accelerate.config.env import LaunchEnv

    request = BackendRequest(arguments={"fsdp_plugin": object()}, launch=LaunchEnv(use_deepspeed=True))
    assert [row.name for row in asked_rows(request)] == ["fsdp"]
    both_launched = BackendRequest(arguments={}, launch=LaunchEnv(use_deepspeed=True, use_fsdp=True))
    assert [row.name for row in asked_rows(both_launched)] == ["deepspeed"]  # the earlier row


def test_unknown_backend_arguments_and_unavailable_rows_are_named() -> None:
    from accelerate.backends.resolve import backend_request, fp8_refused_by
    from accelerate.config.env import LaunchEnv
    from accelerate.utils.errors import NotAvailableYetError

    with pytest.raises(TypeError, match="no backend row owns"):
        backend_request({"horovod_plugin": object()}, LaunchEnv())
    with pytest.raises(NotAvailableYetError, match="megatron_lm_plugin"):
        backend_request({"megatron_lm_plugin": object()}, LaunchEnv())
    assert fp8_refused_by({"deepspeed": {"default": object()}}) == "DeepSpeed"
    assert fp8_refused_by({"fsdp": object()}) is None
