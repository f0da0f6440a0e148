"""One rank of the 2-process FSDP2 benchmark (started by torchrun).

A hand-written ``fully_shard`` loop (each block, then the root, on a 1-D DeviceMesh; AdamW; gradient
clipping; ``set_requires_gradient_sync(False)`` on the micro-steps that accumulate) and the same loop
through ``Accelerator(fsdp_plugin=...)`` are set up in the same processes, then alternate optimizer step
by optimizer step at accumulation 1 and 4. Writes DIR/rank{N}.json with CPU seconds per optimizer step.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

WIDTH, DEPTH, BATCH, NUM_BATCHES, MAX_NORM = 256, 4, 32, 8, 1.0
ACCUMULATIONS = (1, 4)
Loop = Callable[[int, int], None]  # run(optimizer_steps, accumulation)


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
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    batches = make_batches(accelerator.process_index)

    def run(steps: int, accum: int) -> None:
        accelerator.gradient_accumulation_steps = accum
        for i in range(steps * accum):
            x, y = batches[i % NUM_BATCHES]
            with accelerator.accumulate(model):
                loss = F.cross_entropy(model(x), y)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)
                optimizer.step()
                optimizer.zero_grad()

    return run


def interleave(raw: Loop, accel: Loop, accum: int, steps: int, repeats: int) -> dict[str, list[float]]:
    """CPU seconds per optimizer step of each loop, per repeat; the loops alternate every step."""
    clock = time.process_time
    for _ in range(2):
        raw(1, accum)
        accel(1, accum)
    out: dict[str, list[float]] = {"raw": [], "accel": []}
    for _ in range(repeats):
        r = a = 0.0
        for j in range(steps):
            first, second = (raw, accel) if j % 2 == 0 else (accel, raw)
            t0 = clock()
            first(1, accum)
            t1 = clock()
            second(1, accum)
            t2 = clock()
            if j % 2 == 0:
                r, a = r + t1 - t0, a + t2 - t1
            else:
                a, r = a + t1 - t0, r + t2 - t1
        out["raw"].append(r / steps)
        out["accel"].append(a / steps)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", required=True)
    parser.add_argument("--t0", type=float, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    raw, accel = raw_loop(), accelerate_loop()
    result = {
        f"accum{accum}": interleave(raw, accel, accum, max(2, args.steps // accum), args.repeats)
        for accum in ACCUMULATIONS
    }
    Path(args.out, f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
