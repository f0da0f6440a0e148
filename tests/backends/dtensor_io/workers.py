"""Training runs with an FSDP2-sharded model that save and resume (run on the pool's ranks).

The model is sharded with ``torch.distributed.fsdp.fully_shard`` directly (per block, then the
root), as the FSDP engine does in ``prepare``; the checkpoint code under test recognises it by its
DTensor parameters.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed
from tests.helpers.progress import Progress

TOTAL_STEPS = 8
SAVE_AT = 4


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.ff = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.ff(self.norm(x)))


class TinyTransformer(nn.Module):
    """Embedding-free transformer-like stack: input projection, blocks, head (odd sizes on purpose)."""

    def __init__(self, width: int = 6, depth: int = 3) -> None:
        super().__init__()
        self.proj = nn.Linear(5, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)  # type: ignore[no-any-return]


def shard(model: nn.Module) -> nn.Module:
    """What the FSDP engine's prepare does: shard each block, then the root, over all processes."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.blocks:  # type: ignore[union-attr]
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def setup(
    *, sharded: bool, seed: int = 0, project_dir: str | None = None, width: int = 6, **plugin: Any
) -> dict[str, Any]:
    """Accelerator, model (sharded or plain), optimizer, scheduler, shuffled loader, progress."""
    set_seed(seed)
    config = ProjectConfiguration(project_dir=project_dir) if project_dir else None
    accelerator = Accelerator(project_config=config)
    if plugin:  # stands in for FullyShardedDataParallelPlugin(state_dict_type=...)
        accelerator.state.fsdp_plugin = type("Plugin", (), plugin)()  # type: ignore[attr-defined]
    torch.manual_seed(0)  # the same initial weights on every process and in every run
    model = TinyTransformer(width)
    gen = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(64, 5, generator=gen), torch.randn(64, 3, generator=gen))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    if sharded:
        model = shard(model)
        # The FSDP engine lands separately: register the sharded model as its prepare() will.
        accelerator._models.append(model)
    else:
        model = accelerator.prepare_model(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.8)
    optimizer, loader, scheduler = accelerator.prepare(optimizer, loader, scheduler)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    return {
        "accelerator": accelerator,
        "model": model,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "loader": loader,
        "progress": progress,
        "sharded": sharded,
    }


def train(run: dict[str, Any], *, until: int, save_to: str | None = None) -> list[float]:
    """Trains to step ``until`` in one pass over the loader (saving at SAVE_AT into ``save_to``).

    Returns the losses of the steps it ran; with ``save_to``, ``run["at_save"]`` holds the full
    states at the save.
    """
    accelerator, model, optimizer = run["accelerator"], run["model"], run["optimizer"]
    progress, losses = run["progress"], []
    while progress.step < until:
        for x, y in run["loader"]:
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            run["scheduler"].step()
            optimizer.zero_grad()
            losses.append(loss.item())
            progress.step += 1
            if progress.step == SAVE_AT and save_to is not None:
                accelerator.save_state(save_to)
                run["at_save"] = snapshot(run)
            if progress.step == until:
                break
    return losses


def full_model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    from accelerate.backends.dtensor_io.state_dict import full_state_dict

    return {k: v.clone() for k, v in full_state_dict(model).items()}


def full_optimizer_state(run: dict[str, Any]) -> dict[str, Any]:
    from accelerate.backends.dtensor_io.state_dict import full_optimizer_state_dict

    # A copy: plain (unsharded) entries such as Adam's ``step`` come back as the live tensors.
    return copy.deepcopy(full_optimizer_state_dict(run["model"], run["optimizer"]))


def snapshot(run: dict[str, Any]) -> dict[str, Any]:
    """Full (gathered) model and optimizer states, scheduler state and step: what a load restores."""
    sharded = run["sharded"]
    return {
        "model": full_model_state(run["accelerator"].unwrap_model(run["model"])),
        # A copy: the live optimizer state is updated in place by the training that follows.
        "optimizer": full_optimizer_state(run) if sharded else copy.deepcopy(run["optimizer"].state_dict()),
        "scheduler": run["scheduler"].state_dict(),
        "step": run["progress"].step,
    }


def save_then_finish(ckpt: str, *, sharded: bool = True, **plugin: Any) -> dict[str, Any]:
    """Trains to TOTAL_STEPS, saving at SAVE_AT; returns the states at the save and the rest's losses."""
    run = setup(sharded=sharded, **plugin)
    losses = train(run, until=TOTAL_STEPS, save_to=ckpt)
    return {"at_save": run["at_save"], "losses": losses[SAVE_AT:], "final": full_model_state(run["model"])}


def resume_and_finish(ckpt: str, *, sharded: bool = True, **plugin: Any) -> dict[str, Any]:
    """A fresh run (other seeds) that loads ``ckpt`` and trains to TOTAL_STEPS."""
    run = setup(sharded=sharded, **plugin)
    torch.manual_seed(999)
    random.seed(999)
    np.random.seed(999)
    run["accelerator"].load_state(ckpt)
    loaded = snapshot(run)
    losses = train(run, until=TOTAL_STEPS)
    return {"loaded": loaded, "losses": losses, "final": full_model_state(run["model"])}


def save_model_and_state_dict(out_dir: str) -> dict[str, Any]:
    """save_model and get_state_dict of a sharded model after two steps; the full state for comparison."""
    run = setup(sharded=True)
    train(run, until=2)
    accelerator, model = run["accelerator"], run["model"]
    accelerator.save_model(model, out_dir, max_shard_size=300)
    return {"state_dict": accelerator.get_state_dict(model), "full": full_model_state(model)}


def api_round_trip(out_dir: str, kind: str) -> dict[str, Any]:
    """save_fsdp_model/optimizer, then load_fsdp_model/optimizer into a fresh sharded run."""
    from accelerate.utils import load_fsdp_model, load_fsdp_optimizer, save_fsdp_model, save_fsdp_optimizer

    plugin = type("Plugin", (), {"state_dict_type": kind})()
    run = setup(sharded=True)
    train(run, until=3)
    accelerator = run["accelerator"]
    save_fsdp_model(plugin, accelerator, run["model"], out_dir)
    save_fsdp_optimizer(plugin, accelerator, run["optimizer"], run["model"], out_dir)
    saved = snapshot(run)
    fresh = setup(sharded=True, seed=5)
    load_fsdp_model(plugin, fresh["accelerator"], fresh["model"], out_dir)
    load_fsdp_optimizer(plugin, fresh["accelerator"], fresh["optimizer"], fresh["model"], out_dir)
    return {"saved": saved, "loaded": snapshot(fresh)}


def broadcast_full_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """fsdp2_load_full_state_dict: process 0 passes the weights, the others nothing."""
    import torch.distributed as dist

    from accelerate.utils import fsdp2_load_full_state_dict

    run = setup(sharded=True)
    given = state if dist.get_rank() == 0 else {}
    fsdp2_load_full_state_dict(run["accelerator"], run["model"], given)
    return full_model_state(run["model"])


def save_sharded_transformers_model(out_dir: str) -> dict[str, torch.Tensor]:
    """A tiny transformers GPT-2, sharded per block then at the root, written by save_model."""
    from transformers import GPT2Config, GPT2LMHeadModel

    accelerator = Accelerator()
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2, n_embd=8, n_head=2, vocab_size=32, n_positions=16, bos_token_id=0, eos_token_id=0
    )
    model = GPT2LMHeadModel(config)
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    accelerator._models.append(model)
    accelerator.save_model(model, out_dir)
    if accelerator.is_main_process:
        model.config.save_pretrained(out_dir)
    accelerator.wait_for_everyone()
    return full_model_state(model)


def async_save_is_refused(out_dir: str) -> str:
    """save_state(async_save=True) of a sharded model: the error's message (nothing is written)."""
    run = setup(sharded=True)
    try:
        run["accelerator"].save_state(out_dir, async_save=True)
    except ValueError as exc:
        return str(exc)
    return "no error"


class BrokenOnTheWriter(Progress):
    """A registered object whose state_dict fails on process 0, which writes the shared files."""

    def state_dict(self) -> dict[str, int]:
        if torch.distributed.get_rank() == 0:
            raise OSError("disk on fire")
        return super().state_dict()


def save_failing_on_the_writer(out_dir: str) -> str:
    """save_state where process 0's own files fail while every process writes its shards."""
    run = setup(sharded=True)
    run["accelerator"].register_for_checkpointing(BrokenOnTheWriter())
    try:
        run["accelerator"].save_state(out_dir)
    except Exception as exc:  # noqa: BLE001 - returned for the test to read
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def save_past_the_file_size_limit(out_dir: str, limit: int) -> str:
    """save_state of a sharded model where no file may grow past ``limit`` bytes (RLIMIT_FSIZE): the
    shards are larger, the other files are not. The limit is this process's, restored after."""
    import resource

    run = setup(sharded=True, width=192)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        run["accelerator"].save_state(out_dir)
    except Exception as exc:  # noqa: BLE001 - returned for the test to read
        return f"{type(exc).__name__}: {exc}"
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    return "no error"
