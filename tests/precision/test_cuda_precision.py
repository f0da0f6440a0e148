"""Mixed precision on a CUDA GPU: fp16 loss scaling (overflow skips the step) and bf16 / fp16 autocast.

Marked ``cuda``: skipped without a GPU (conftest); ``make gpu-check`` runs them on a lent GPU.
"""

from __future__ import annotations

import pytest
import torch

from accelerate import Accelerator
from tests.training_helpers import flat_params, make_model

pytestmark = pytest.mark.cuda


def _inner_dtypes(model: torch.nn.Module) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    first = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    first.register_forward_hook(lambda _module, _inputs, output: seen.append(output.dtype))
    return seen


def test_fp16_overflow_skips_the_step_and_halves_the_scale() -> None:
    accelerator = Accelerator(mixed_precision="fp16")
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    scaler = accelerator.scaler
    assert scaler is not None
    x = torch.randn(4, 8, device=accelerator.device)
    before, scale = flat_params(model), scaler.get_scale()
    accelerator.backward(model(x).sum() * float("inf"))
    optimizer.step()
    optimizer.zero_grad()
    assert optimizer.step_was_skipped
    assert torch.equal(flat_params(model), before)
    assert scaler.get_scale() == scale / 2
    accelerator.backward(model(x).mean() * 1e-3)  # small: the scaled fp16 gradients must not overflow
    optimizer.step()
    assert not optimizer.step_was_skipped
    assert not torch.equal(flat_params(model), before)


@pytest.mark.parametrize(("mode", "dtype"), [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_prepared_model_computes_in_the_half_dtype_and_returns_fp32(mode: str, dtype: torch.dtype) -> None:
    accelerator = Accelerator(mixed_precision=mode)
    model = accelerator.prepare(make_model())
    seen = _inner_dtypes(model)
    out = model(torch.randn(4, 8, device=accelerator.device))
    assert seen == [dtype]
    assert out.dtype == torch.float32
    assert next(model.parameters()).dtype == torch.float32  # master weights stay fp32
    assert (accelerator.scaler is not None) == (mode == "fp16")


def test_accelerator_autocast_outside_the_model() -> None:
    accelerator = Accelerator(mixed_precision="bf16")
    a = torch.randn(8, 8, device=accelerator.device)
    with accelerator.autocast():
        inside = a @ a
    assert inside.dtype == torch.bfloat16
    assert (a @ a).dtype == torch.float32
