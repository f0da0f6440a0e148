"""peft as a real client: it installs next to our package without replacing it, and LoRA trains
through prepare() on 1 and 2 processes (only the adapter weights move)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.pool import WorkerPool

peft = pytest.importorskip("peft")

SRC = Path(__file__).resolve().parents[2] / "src"


def test_peft_depends_on_accelerate_and_ours_stays_installed() -> None:
    import importlib.metadata

    import accelerate

    requirements = importlib.metadata.requires("peft") or []
    assert any(r.startswith("accelerate") for r in requirements)  # peft really depends on accelerate
    assert Path(accelerate.__file__).resolve().is_relative_to(SRC)  # and the one it gets is ours
    assert importlib.metadata.version("accelerate") == accelerate.__version__


def _lora_training(steps: int) -> dict[str, object]:
    from peft import LoraConfig, get_peft_model

    from accelerate import Accelerator

    accelerator = Accelerator()
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["0", "2"], lora_dropout=0.0))
    frozen_before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    lora_before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    gen = torch.Generator().manual_seed(1 + accelerator.process_index)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(16, 8, generator=gen), torch.randn(16, 2, generator=gen)
        loss = F.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    unwrapped = accelerator.unwrap_model(model)
    params = dict(unwrapped.named_parameters())
    return {
        "frozen_unchanged": all(torch.equal(params[n], t) for n, t in frozen_before.items()),
        "lora_changed": any(not torch.equal(params[n], t) for n, t in lora_before.items()),
        "lora_names": sorted(lora_before),
        "lora_sum": float(sum(params[n].detach().sum() for n in lora_before)),
    }


def test_lora_trains_through_prepare_in_one_process() -> None:
    result = _lora_training(5)
    assert result["frozen_unchanged"] and result["lora_changed"]
    assert all("lora_" in name for name in result["lora_names"])  # type: ignore[union-attr]


def test_lora_trains_through_prepare_on_two_processes(pool2: WorkerPool) -> None:
    r0, r1 = pool2.run(_lora_training, 5)
    assert r0["frozen_unchanged"] and r0["lora_changed"]
    # Different data per process, one model: DDP kept the adapters identical on both.
    assert r0["lora_sum"] == r1["lora_sum"]
