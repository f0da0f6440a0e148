"""get_grad_scaler / get_mixed_precision_context_manager, and is_peft_model."""

from __future__ import annotations

import types

import pytest
import torch

from accelerate import Accelerator
from accelerate.state import DistributedType
from accelerate.utils import get_grad_scaler, get_mixed_precision_context_manager, is_peft_model
from accelerate.utils.dataclasses import AutocastKwargs


def test_get_grad_scaler_for_this_device() -> None:
    Accelerator(cpu=True)
    scaler = get_grad_scaler(init_scale=1024.0, growth_interval=10)
    assert isinstance(scaler, torch.amp.GradScaler)
    assert scaler.get_scale() == 1024.0 and scaler.get_growth_interval() == 10
    with pytest.raises(TypeError):
        get_grad_scaler(not_an_option=1)
    # Under FSDP2 torch's own scaler handles the sharded (DTensor) gradients.
    assert isinstance(get_grad_scaler(DistributedType.FSDP, init_scale=8.0), torch.amp.GradScaler)


def test_mixed_precision_context_follows_the_state() -> None:
    Accelerator(cpu=True, mixed_precision="bf16")
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    with get_mixed_precision_context_manager(native_amp=True):
        assert (a @ b).dtype == torch.bfloat16
    with get_mixed_precision_context_manager(native_amp=True, autocast_kwargs=AutocastKwargs(enabled=False)):
        assert (a @ b).dtype == torch.float32
    with get_mixed_precision_context_manager(native_amp=False):
        assert (a @ b).dtype == torch.float32


def test_mixed_precision_context_without_mixed_precision_is_a_null_context() -> None:
    Accelerator(cpu=True)
    with get_mixed_precision_context_manager(native_amp=True):
        assert (torch.randn(2, 2) @ torch.randn(2, 2)).dtype == torch.float32


def test_is_peft_model_recognises_peft_classes_without_importing_peft() -> None:
    # A class defined under the `peft` package name, as peft's own PeftModel is.
    peft_model = types.new_class("PeftModel", (torch.nn.Module,))
    peft_model.__module__ = "peft.peft_model"
    subclass = types.new_class("PeftModelForCausalLM", (peft_model,))
    assert is_peft_model(subclass()) and is_peft_model(peft_model())
    not_peft = types.new_class("PeftModel", (torch.nn.Module,))  # same name, another package
    assert not is_peft_model(not_peft()) and not is_peft_model(torch.nn.Linear(1, 1))
