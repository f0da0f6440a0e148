"""Rank functions for the pipeline-parallel training tests (top-level: the pool sends them by name)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.backends.parallel.pipeline_stage import full_tensor
from accelerate.state.parallelism import ParallelismConfig
from tests.backends.parallel.models import apply_tp, dataset, make_model
from tests.backends.parallel.workers import ACCUM, MAX_NORM, PER_RANK, STEPS


def held_bytes(*modules: torch.nn.Module) -> int:
    """The bytes of parameter and buffer data ``modules`` hold on this rank (each storage once; a
    DTensor's local piece; a freed tensor's storage holds none)."""
    storages = {}
    for module in modules:
        for tensor in (*module.parameters(), *module.buffers()):
            local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
            storages[local.untyped_storage().data_ptr()] = local.untyped_storage().nbytes()
    return sum(storages.values())


def train(sizes: dict[str, Any]) -> dict[str, Any]:
    """The five-line loop under ``pp_size``: the loss runs in the schedule, labels go to the model call."""
    config = ParallelismConfig(pp_loss_fn=F.mse_loss, **sizes)
    accelerator = Accelerator(cpu=True, parallelism_config=config, gradient_accumulation_steps=ACCUM)
    model = make_model()
    if config.tp_enabled:  # the plan goes on the whole model before prepare, as without a pipeline
        apply_tp(model, accelerator.torch_device_mesh["tp"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    bytes_before = held_bytes(model)
    shards = accelerator.state.run.data_shards[0]
    x, y = dataset(STEPS * ACCUM * PER_RANK * shards)
    loader = DataLoader(TensorDataset(x, y), batch_size=PER_RANK)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    norms, losses, seen, sending = [], [], [], []
    for xb, yb in loader:
        seen.append(xb.clone())
        with accelerator.accumulate(model):
            loss = model(xb, labels=yb)
            sending.append(model._sending is not None)  # the last stage's loss send, still unawaited
            accelerator.backward(loss)
            losses.append(float(loss.detach()))
            if accelerator.sync_gradients:
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)))
            optimizer.step()
            optimizer.zero_grad()
    with torch.no_grad():
        eval_loss = float(model(x[:PER_RANK], labels=y[:PER_RANK]))
        eval_out = model(x[:PER_RANK])
    settled = model._sending is None  # each call awaits the send of the one before
    gathered = accelerator.gather_for_metrics(torch.cat(seen))  # the stages of one pipeline read alike
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    inner = accelerator.unwrap_model(model)
    trained = {n: model.shards.trained(p) for n, p in inner.named_parameters()}  # the shards under dp_shard
    return {
        "stage": {n: full_tensor(p).detach().clone() for n, p in trained.items() if id(p) in held},
        "all_names": [n for n, _ in inner.named_parameters()],
        "layouts": sorted(  # how the optimizer's tensors are laid out: (mesh dims, placements)
            {
                (tuple(p.device_mesh.mesh_dim_names), tuple(map(str, p.placements)))
                for group in optimizer.param_groups
                for p in group["params"]
                if hasattr(p, "placements")
            }
        ),
        "whole": accelerator.get_state_dict(model),
        "bytes_before": bytes_before,  # the whole model, before the cut
        "bytes_after": held_bytes(inner, *model.stage_modules),  # what the rank holds once cut
        "norms": norms,
        "losses": losses,
        "eval_loss": eval_loss,
        "gathered": gathered,
        "samples": len(x),
        "eval_out": eval_out,
        "sending": sending,
        "settled": settled,
        "last_stage": model.holds_last_stage,
        "strategy": accelerator.strategy.name,
        "describe": accelerator.strategy.describe(),
    }


def reference_losses() -> tuple[list[float], float, torch.Tensor]:
    """The one-process run's per-micro-step losses, then its evaluation loss and output after training."""
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = dataset(STEPS * ACCUM * PER_RANK)
    losses = []
    for step in range(STEPS):
        for micro in range(ACCUM):
            start = (step * ACCUM + micro) * PER_RANK
            loss = F.mse_loss(model(x[start : start + PER_RANK]), y[start : start + PER_RANK])
            losses.append(float(loss.detach()))
            (loss / ACCUM).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        out = model(x[:PER_RANK])
        return losses, float(F.mse_loss(out, y[:PER_RANK])), out


def refusal(case: str) -> str:
    """The error one misuse of pipeline parallelism raises on this rank (its type and message)."""
    sizes: dict[str, Any] = {"pp_size": 2, "pp_loss_fn": F.mse_loss, "pp_microbatches": 2}
    try:
        if case == "with_cp":
            Accelerator(cpu=True, parallelism_config=ParallelismConfig(**sizes, cp_size=2))
            return "no error"
        accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(**sizes))
        if case == "one_block":
            accelerator.prepare(torch.nn.Sequential(torch.nn.Linear(4, 4)))
        elif case == "odd_batch":
            x, y = dataset(6)
            accelerator.prepare(DataLoader(TensorDataset(x, y), batch_size=3))
        elif case == "no_labels":
            model = accelerator.prepare(make_model())
            model(dataset(2)[0])
        return "no error"
    except Exception as exc:  # noqa: BLE001 - the test reads the error's type and message
        return f"{type(exc).__name__}: {exc}"


def _one_step(accelerator: Accelerator, model: Any, optimizer: Any) -> None:
    x, y = dataset(PER_RANK, seed=7)  # a fixed batch: every run takes the same last step
    shards, shard = accelerator.state.run.data_shards
    rows = PER_RANK // shards  # the batch split over the data shards: the same mean loss
    xb, yb = x[shard * rows : (shard + 1) * rows], y[shard * rows : (shard + 1) * rows]
    accelerator.backward(model(xb, labels=yb))
    accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)
    optimizer.step()
    optimizer.zero_grad()


def _prepared(sizes: dict[str, Any]) -> tuple[Accelerator, Any, Any]:
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(pp_loss_fn=F.mse_loss, **sizes))
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model, optimizer


def train_save_continue(sizes: dict[str, Any], folder: str) -> dict[str, dict[str, torch.Tensor]]:
    """Three steps, save_state and save_model (into ``folder``/model), then one more step: the whole
    model when saved and at the end."""
    accelerator, model, optimizer = _prepared(sizes)
    for _ in range(3):
        _one_step(accelerator, model, optimizer)
    accelerator.save_state(folder)
    accelerator.save_model(model, f"{folder}/model")
    at_save = {k: v.clone() for k, v in accelerator.get_state_dict(model).items()}
    _one_step(accelerator, model, optimizer)
    return {"at_save": at_save, "end": accelerator.get_state_dict(model)}


def resume_continue(sizes: dict[str, Any], folder: str) -> dict[str, torch.Tensor]:
    """load_state into a fresh model (pipelined or not, any split, sharded or not), then the same last step."""
    if sizes.get("pp_size", 1) > 1:
        accelerator, model, optimizer = _prepared(sizes)
        if accelerator.parallelism_config is not None and accelerator.parallelism_config.tp_enabled:
            raise ValueError("resume_continue applies no tensor-parallel plan")
    else:
        accelerator = Accelerator(cpu=True)
        model = make_model(seed=5)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.load_state(folder)
    if sizes.get("pp_size", 1) > 1:
        _one_step(accelerator, model, optimizer)
        return accelerator.get_state_dict(model)
    return {k: v.clone() for k, v in accelerator.get_state_dict(model).items()}


def llama_own_loss(sizes: dict[str, Any]) -> dict[str, Any]:
    """A tiny transformers Llama (from its config) under a pipeline: model(input_ids=..., labels=...).loss."""
    from tests.backends.parallel.hf_workers import batch, make_llama

    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(**sizes))
    model = make_llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    losses = []
    for seed in (3, 4):
        ids = batch(seed)
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        accelerator.backward(loss)
        losses.append(float(loss.detach()))
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        eval_loss = float(model(input_ids=batch(5), labels=batch(5), use_cache=False).loss)
    return {"losses": losses, "eval_loss": eval_loss, "whole": accelerator.get_state_dict(model)}


def llama_reference() -> dict[str, Any]:
    from tests.backends.parallel.hf_workers import batch, make_llama

    model = make_llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for seed in (3, 4):
        ids = batch(seed)
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        losses.append(float(loss.detach()))
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        eval_loss = float(model(input_ids=batch(5), labels=batch(5), use_cache=False).loss)
    return {
        "losses": losses,
        "eval_loss": eval_loss,
        "whole": {k: v.detach() for k, v in model.state_dict().items()},
    }


def sgd_reload_midway(sizes: dict[str, Any], folder: str) -> dict[str, dict[str, torch.Tensor]]:
    """An optimizer with no state (plain SGD): save_state after a step, one more step, load_state
    (the model already cut), the same step again: it must land where the first one did."""
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(pp_loss_fn=F.mse_loss, **sizes))
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    _one_step(accelerator, model, optimizer)
    accelerator.save_state(folder)
    _one_step(accelerator, model, optimizer)
    first = {k: v.clone() for k, v in accelerator.get_state_dict(model).items()}
    accelerator.load_state(folder)
    _one_step(accelerator, model, optimizer)
    return {"first": first, "again": accelerator.get_state_dict(model)}
