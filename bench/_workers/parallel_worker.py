"""One rank of the N-D parallelism benchmark (started by torchrun; 2 processes for TP, 4 for dp_shard x TP).

A hand-written loop (``init_device_mesh``, ``parallelize_module`` with a Megatron plan on ``tp``, and
for ``--dp_shard 2`` ``fully_shard`` per block then the root on ``dp_shard``; AdamW; clipping by the
global norm) and the same loop through ``Accelerator(parallelism_config=...)`` are set up in the same
processes and alternate optimizer step by optimizer step. Writes DIR/rank{N}.json with CPU seconds
per optimizer step.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # torchrun runs this file as a script

from bench._workers.common import Step, accelerate_token_steps, adamw_prepared, race  # noqa: E402

WIDTH, HEADS, SEQ, BATCH, DEPTH, NUM_BATCHES, MAX_NORM = 256, 8, 32, 8, 4, 4, 1.0


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.q, self.k, self.v = (nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(3))
        self.o = nn.Linear(WIDTH, WIDTH)
        self.fc1, self.fc2 = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.norm1(x)
        q, k, v = (
            t.view(b, s, -1, WIDTH // HEADS).transpose(1, 2) for t in (self.q(h), self.k(h), self.v(h))
        )
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(512, WIDTH)
        self.blocks = nn.ModuleList([Block() for _ in range(DEPTH)])
        self.head = nn.Linear(WIDTH, 512)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def make_model(tp_mesh: Any) -> nn.Module:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    model = Net()
    plan: dict[str, Any] = {}
    for i in range(DEPTH):
        plan.update({f"blocks.{i}.{n}": ColwiseParallel() for n in ("q", "k", "v", "fc1")})
        plan.update({f"blocks.{i}.{n}": RowwiseParallel() for n in ("o", "fc2")})
    return parallelize_module(model, tp_mesh, plan)


def batches(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randint(0, 512, (BATCH, SEQ), generator=gen),
            torch.randint(0, 512, (BATCH, SEQ), generator=gen),
        )
        for _ in range(NUM_BATCHES)
    ]


def clip_by_global_norm(params: list[nn.Parameter], max_norm: float) -> None:
    """Hand-written global-norm clipping over DTensor (any mesh) and plain gradients."""
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in params if p.grad is not None]
    groups: dict[Any, list[torch.Tensor]] = {}
    for g in grads:
        key = (id(g.device_mesh), tuple(g.placements)) if isinstance(g, DTensor) else None
        groups.setdefault(key, []).append(g)
    total_sq = 0.0
    for group in groups.values():
        norm = torch.nn.utils.get_total_norm(group)
        total_sq += float(norm.full_tensor() if isinstance(norm, DTensor) else norm) ** 2
    coef = min(1.0, max_norm / (math.sqrt(total_sq) + 1e-6))
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)


def raw_loop(dp_shard: int, tp: int) -> Step:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if dp_shard > 1:
        mesh = init_device_mesh("cpu", (dp_shard, tp), mesh_dim_names=("dp_shard", "tp"))
    else:
        mesh = init_device_mesh("cpu", (tp,), mesh_dim_names=("tp",))
    model = make_model(mesh["tp"])
    if dp_shard > 1:
        for block in model.blocks:
            fully_shard(block, mesh=mesh["dp_shard"])
        fully_shard(model, mesh=mesh["dp_shard"], reshard_after_forward=None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = batches(dist.get_rank() // tp)
    step = [0]

    def run() -> None:
        x, y = data[step[0] % NUM_BATCHES]
        step[0] += 1
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        clip_by_global_norm(list(model.parameters()), MAX_NORM)
        optimizer.step()
        optimizer.zero_grad()

    return run


def accelerate_loop(dp_shard: int, tp: int) -> Step:
    from accelerate import Accelerator
    from accelerate.utils import FullyShardedDataParallelPlugin, ParallelismConfig

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"]
    )
    config = ParallelismConfig(dp_shard_size=dp_shard, tp_size=tp)
    accelerator = Accelerator(parallelism_config=config, fsdp_plugin=plugin if dp_shard > 1 else None)
    model, optimizer = adamw_prepared(accelerator, make_model(accelerator.torch_device_mesh["tp"]))
    return accelerate_token_steps(
        accelerator, model, optimizer, batches(accelerator.state.run.data_shards[1]), MAX_NORM
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dp_shard", type=int, default=1)
    parser.add_argument("--tp", type=int, default=2)
    race(
        lambda args: raw_loop(args.dp_shard, args.tp),
        lambda args: accelerate_loop(args.dp_shard, args.tp),
        parser,
    )


if __name__ == "__main__":
    main()
