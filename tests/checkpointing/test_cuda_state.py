"""save_state / load_state with the model, AdamW state and fp16 scaler on a CUDA GPU, and the CUDA RNG.

Marked ``cuda``: skipped without a GPU (conftest); ``make gpu-check`` runs them on a lent GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from accelerate import Accelerator
from tests.training_helpers import flat_params, global_batches, make_model

pytestmark = pytest.mark.cuda


def _train(
    accelerator: Accelerator, model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int
) -> None:
    for x, y in global_batches(steps, 8, seed=steps):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x.to(accelerator.device)), y.to(accelerator.device))
        accelerator.backward(loss)
        optimizer.step()


def _exp_avgs(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [state["exp_avg"] for state in optimizer.state_dict()["state"].values()]


def test_round_trip_restores_cuda_weights_optimizer_state_scaler_and_cuda_rng(tmp_path: Path) -> None:
    accelerator = Accelerator(mixed_precision="fp16")
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    _train(accelerator, model, optimizer, 3)
    folder = tmp_path / "ckpt"
    accelerator.save_state(str(folder))
    params, exp_avgs = flat_params(model), [t.detach().cpu().clone() for t in _exp_avgs(optimizer)]
    scaler = accelerator.scaler
    assert scaler is not None
    scale = scaler.get_scale()
    draw = torch.rand(5, device=accelerator.device)  # the CUDA generator right after the save

    # Move everything on: more steps, an overflow that halves the scale, more CUDA draws.
    _train(accelerator, model, optimizer, 2)
    accelerator.backward(model(torch.ones(2, 8, device=accelerator.device)).sum() * float("inf"))
    optimizer.step()
    optimizer.zero_grad()
    torch.rand(100, device=accelerator.device)
    assert scaler.get_scale() != scale and not torch.equal(flat_params(model), params)

    accelerator.load_state(str(folder))
    assert all(p.device.type == "cuda" for p in model.parameters())
    assert torch.equal(flat_params(model), params)
    restored = _exp_avgs(optimizer)
    assert all(t.device.type == "cuda" for t in restored)
    for got, want in zip(restored, exp_avgs, strict=True):
        assert torch.equal(got.cpu(), want)
    assert scaler.get_scale() == scale
    assert torch.equal(torch.rand(5, device=accelerator.device), draw)
    _train(accelerator, model, optimizer, 1)  # training goes on from the restored state


def test_weights_saved_from_the_gpu_load_on_the_cpu(tmp_path: Path) -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(make_model())
    accelerator.save_state(str(tmp_path / "ckpt"))
    saved = load_file(str(tmp_path / "ckpt" / "model.safetensors"))
    assert saved and all(t.device.type == "cpu" for t in saved.values())
    for name, param in model.state_dict().items():
        assert torch.equal(saved[name], param.cpu()), name
