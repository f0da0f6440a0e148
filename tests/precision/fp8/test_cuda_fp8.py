"""fp8 on an fp8-capable CUDA GPU: torchao's float8 matmuls, Transformer Engine and MS-AMP for real.

Marked ``cuda`` (skipped without a GPU, by conftest); each test also skips, with its reason, where the
GPU cannot compute in fp8 (compute capability below 8.9) or its library is not installed.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

from accelerate import Accelerator
from accelerate.utils import AORecipeKwargs, MSAMPRecipeKwargs, TERecipeKwargs
from accelerate.utils.environment import check_cuda_fp8_capability
from tests.precision.fp8.models import dataset, make_model

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not (torch.cuda.is_available() and check_cuda_fp8_capability()),
        reason="needs an NVIDIA GPU with fp8 support (compute capability 8.9 or newer)",
    ),
]


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _losses(accelerator: Accelerator, steps: int = 20) -> list[float]:
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    x, y = (t.to(accelerator.device) for t in dataset(16 * steps))
    losses = []
    for step in range(steps):
        loss = F.mse_loss(model(x[step * 16 : step * 16 + 16]), y[step * 16 : step * 16 + 16])
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.skipif(not _installed("torchao"), reason="torchao is not installed")
def test_torchao_trains_with_float8_matmuls_on_the_gpu() -> None:
    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs()])
    losses = _losses(accelerator)
    assert accelerator.fp8_backend == "AO" and losses[-1] < losses[0]


@pytest.mark.skipif(not _installed("transformer_engine"), reason="transformer-engine is not installed")
def test_transformer_engine_converts_and_trains() -> None:
    from accelerate.utils.transformer_engine import has_transformer_engine_layers

    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[TERecipeKwargs(fp8_format="HYBRID")])
    assert accelerator.fp8_backend == "TE"
    model = accelerator.prepare(make_model())
    assert has_transformer_engine_layers(model)
    losses = _losses(Accelerator(mixed_precision="fp8", kwargs_handlers=[TERecipeKwargs()]))
    assert losses[-1] < losses[0]


@pytest.mark.skipif(not _installed("msamp"), reason="msamp is not installed")
def test_msamp_initialises_model_and_optimizer_together() -> None:
    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[MSAMPRecipeKwargs(opt_level="O1")])
    assert accelerator.fp8_backend == "MSAMP"
    losses = _losses(accelerator)
    assert losses[-1] < losses[0]
