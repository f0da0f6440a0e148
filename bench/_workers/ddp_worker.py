"""One rank of the 2-process training benchmark.

Usage: torchrun ... ddp_worker.py --mode raw --out DIR --t0 T
       accelerate launch ... ddp_worker.py --mode accelerate --out DIR --t0 T
``raw`` is plain DistributedDataParallel (``no_sync`` on the micro-steps that accumulate);
``accelerate`` is the same loop through ``Accelerator``. The ``--mode`` loop is set up first and
its first optimizer step timed from T (when the parent started the launcher). Then the other loop
is set up in the same processes and the two alternate, optimizer step by optimizer step, at
accumulation 1 and 4. Writes DIR/rank{N}.json.
"""

from __future__ import annotations

import time

STARTED = time.time()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# Same folder (torchrun and accelerate launch run this file as a script): the shared skeleton.
from common import Loop, accelerate_micro_steps, adamw_prepared, interleave_accumulations  # noqa: E402

IMPORTED = time.time()
BATCH, WIDTH, CLASSES, NUM_BATCHES = 64, 512, 10, 8
ACCUMULATIONS = (1, 4)


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, CLASSES)
    )


def make_batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(rank)
    return [
        (torch.randn(BATCH, WIDTH, generator=gen), torch.randint(0, CLASSES, (BATCH,), generator=gen))
        for _ in range(NUM_BATCHES)
    ]


def raw_loop() -> Loop:
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = make_batches(dist.get_rank())

    def run(steps: int, accum: int) -> None:
        for i in range(steps * accum):
            x, y = batches[i % NUM_BATCHES]
            last = (i + 1) % accum == 0
            with contextlib.nullcontext() if last else model.no_sync():
                loss = F.cross_entropy(model(x), y)
                if accum > 1:
                    loss = loss / accum
                loss.backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()

    return run


def accelerate_loop() -> Loop:
    from accelerate import Accelerator

    accelerator = Accelerator()
    model, optimizer = adamw_prepared(accelerator, make_model())
    batches = make_batches(accelerator.process_index)

    def run(steps: int, accum: int) -> None:
        accelerator.gradient_accumulation_steps = accum
        accelerate_micro_steps(accelerator, model, optimizer, batches, steps * accum)

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["raw", "accelerate"], required=True)
    parser.add_argument(
        "--steps", type=int, default=24, help="optimizer steps per repeat, at each accumulation"
    )
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--out", required=True)
    parser.add_argument("--t0", type=float, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    own = raw_loop() if args.mode == "raw" else accelerate_loop()
    ready = time.time()
    own(1, 1)
    first_step = time.time()
    other = accelerate_loop() if args.mode == "raw" else raw_loop()
    raw, accel = (own, other) if args.mode == "raw" else (other, own)
    result: dict[str, object] = {
        "first_step_s": first_step - args.t0,
        "python_started_s": STARTED - args.t0,
        "torch_imported_s": IMPORTED - args.t0,
        "ready_s": ready - args.t0,
    }
    result.update(interleave_accumulations(raw, accel, ACCUMULATIONS, args.steps, args.repeats, warmup=3))
    Path(args.out, f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
