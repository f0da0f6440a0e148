"""One rank of the 2-process FSDP2 benchmark (started by torchrun).

A hand-written ``fully_shard`` loop (each block, then the root, on a 1-D DeviceMesh; AdamW; gradient
clipping; ``set_requires_gradient_sync(False)`` on the micro-steps that accumulate) and the same loop
through ``Accelerator(fsdp_plugin=...)`` are set up in the same processes, then alternate optimizer step
by optimizer step at accumulation 1 and 4. Writes DIR/rank{N}.json with CPU seconds per optimizer step.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # torchrun runs this file as a script

from bench._workers.common import (  # noqa: E402
    Loop,
    accelerate_micro_steps,
    adamw_prepared,
    interleave_accumulations,
    parse_args,
    run_rank,
)

WIDTH, DEPTH, BATCH, NUM_BATCHES, MAX_NORM = 256, 4, 32, 8, 1.0
ACCUMULATIONS = (1, 4)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.fc1 = nn.Linear(WIDTH, 4 * WIDTH)
        self.fc2 = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(DEPTH)])
        self.head = nn.Linear(WIDTH, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return Net()


def make_batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(rank)
    return [
        (torch.randn(BATCH, WIDTH, generator=gen), torch.randint(0, 10, (BATCH,), generator=gen))
        for _ in range(NUM_BATCHES)
    ]


def raw_loop() -> Loop:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = make_model()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = make_batches(dist.get_rank())

    def run(steps: int, accum: int) -> None:
        for i in range(steps * accum):
            x, y = batches[i % NUM_BATCHES]
            last = (i + 1) % accum == 0
            model.set_requires_gradient_sync(last)
            loss = F.cross_entropy(model(x), y)
            (loss / accum if accum > 1 else loss).backward()
            if last:
                torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
                optimizer.step()
                optimizer.zero_grad()

    return run


def accelerate_loop() -> Loop:
    from accelerate import Accelerator
    from accelerate.utils import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"]
    )
    accelerator = Accelerator(fsdp_plugin=plugin)
    model, optimizer = adamw_prepared(accelerator, make_model())
    batches = make_batches(accelerator.process_index)

    def run(steps: int, accum: int) -> None:
        accelerator.gradient_accumulation_steps = accum
        accelerate_micro_steps(accelerator, model, optimizer, batches, steps * accum, MAX_NORM)

    return run


def main() -> None:
    args = parse_args(argparse.ArgumentParser())

    def measure() -> dict[str, Any]:
        raw, accel = raw_loop(), accelerate_loop()
        return interleave_accumulations(raw, accel, ACCUMULATIONS, args.steps, args.repeats)

    run_rank(args.out, measure)


if __name__ == "__main__":
    main()
