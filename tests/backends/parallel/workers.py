"""Rank functions for the N-D parallelism tests (top-level: the pool sends them by name)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.state.parallelism import ParallelismConfig
from tests.backends.parallel.models import apply_tp, dataset, make_model
from tests.backends.parallel.resume_step import load_then_step

STEPS, ACCUM, PER_RANK, MAX_NORM = 3, 2, 2, 0.5


def _accelerator(sizes: dict[str, int], accum: int = ACCUM) -> Accelerator:
    config = ParallelismConfig(**sizes)  # type: ignore[arg-type]
    return Accelerator(cpu=True, parallelism_config=config, gradient_accumulation_steps=accum)


def _model(accelerator: Accelerator) -> torch.nn.Module:
    model = make_model()
    if accelerator.parallelism_config is not None and accelerator.parallelism_config.tp_enabled:
        apply_tp(model, accelerator.torch_device_mesh["tp"])
    return model


def train(sizes: dict[str, int], save_to: str | None = None) -> dict[str, Any]:
    """Trains STEPS steps of ACCUM micro-batches of PER_RANK samples per data shard; reports the facts."""
    from torch.distributed.tensor import DTensor

    accelerator = _accelerator(sizes)
    model = _model(accelerator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    shards = accelerator.state.run.data_shards[0]
    x, y = dataset(STEPS * ACCUM * PER_RANK * shards)
    loader = DataLoader(TensorDataset(x, y), batch_size=PER_RANK)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    norms, unsynced, seen = [], [], []
    for xb, yb in loader:
        seen.append(xb.clone())
        with accelerator.accumulate(model):
            loss = F.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            if not accelerator.sync_gradients:
                unsynced.append(all(p.grad is None for p in model.parameters()))
            else:
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)))
            optimizer.step()
            optimizer.zero_grad()
    gathered = accelerator.gather_for_metrics(torch.cat(seen))
    mesh = accelerator.torch_device_mesh
    if save_to is not None:
        accelerator.save_state(save_to)
    return {
        "state": accelerator.get_state_dict(model),
        "norms": norms,
        "unsynced": unsynced,
        "gathered": gathered,
        "seen": torch.cat(seen),
        "mesh": (tuple(mesh.mesh_dim_names), tuple(mesh.shape)) if mesh is not None else None,
        "ranks": (
            accelerator.data_parallel_rank,
            accelerator.data_parallel_shard_rank,
            accelerator.tensor_parallel_rank,
            accelerator.context_parallel_rank,
        ),
        "type": accelerator.distributed_type.value,
        "strategy": accelerator.strategy.name,
        "all_dtensor": all(isinstance(p, DTensor) for p in model.parameters()),
        "composable": accelerator.is_composable_parallelism_enabled,
    }


def resume(sizes: dict[str, int], folder: str, global_batch: int) -> dict[str, Any]:
    """Loads a state saved under another topology and trains one more step on a fixed global batch."""
    accelerator = _accelerator(sizes, accum=1)
    model = _model(accelerator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    shards, shard = accelerator.state.run.data_shards
    x, y = dataset(global_batch, seed=7)  # its own generator: built before the load changes nothing
    per = global_batch // shards
    batch = (x[shard * per : (shard + 1) * per], y[shard * per : (shard + 1) * per])

    def loss(b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return F.mse_loss(model(b[0]), b[1])

    return load_then_step(accelerator, model, optimizer, folder, [batch], loss, MAX_NORM)


def refusals() -> dict[str, str]:
    """Each bad input's message, caught on every rank (no rank is left waiting in a collective)."""
    messages: dict[str, str] = {}
    accelerator = _accelerator({"tp_size": 2})
    try:
        accelerator.prepare(make_model())  # no tensor-parallel plan applied
    except ValueError as error:
        messages["no_plan"] = str(error)
    import torch.distributed as dist

    # A script bug: each rank builds a different mesh. Every rank raises (the gather is collective).
    sizes = {"tp_size": 2} if dist.get_rank() == 0 else {"dp_shard_size": 2}
    try:
        _accelerator(sizes)
    except ValueError as error:
        messages["mismatch"] = str(error)
    return messages


def resume_batches(sizes: dict[str, int], skip: int) -> dict[str, Any]:
    """The batches a prepared loader gives, and those skip_first_batches gives after ``skip`` of them."""
    accelerator = _accelerator(sizes, accum=1)
    x, _ = dataset(8 * PER_RANK * accelerator.state.run.data_shards[0])
    loader = accelerator.prepare(DataLoader(TensorDataset(x), batch_size=PER_RANK))
    whole = [batch.clone() for (batch,) in loader]
    resumed = [batch.clone() for (batch,) in accelerator.skip_first_batches(loader, skip)]
    return {"whole": whole, "resumed": resumed}
