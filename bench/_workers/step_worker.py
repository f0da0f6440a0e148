"""One process of the per-step overhead benchmark: a raw loop and the Accelerator loop, alternated.

Usage: python step_worker.py --precision no|bf16 --accum K --out DIR [--block N --repeats R]
Writes DIR/rank0.json: CPU seconds per optimizer step of each repeat, raw and accelerate, aligned.
Both loops train their own copy of the same MLP (512-512-10, batch 64, AdamW) on the same
pre-built batches, with one torch thread, so the only difference is the code around the step.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

# Same folder (the script's own, on sys.path): the alternating CPU-time measurement, the loop's
# accelerate side.
from common import accelerate_micro_steps, adamw_prepared, alternate

BATCH, WIDTH, CLASSES, NUM_BATCHES = 64, 512, 10, 8


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, CLASSES)
    )


def make_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [
        (torch.randn(BATCH, WIDTH, generator=gen), torch.randint(0, CLASSES, (BATCH,), generator=gen))
        for _ in range(NUM_BATCHES)
    ]


def raw_loop(precision: str, accum: int) -> Callable[[int], None]:
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = make_batches()
    autocast = (
        (lambda: torch.autocast("cpu", dtype=torch.bfloat16))
        if precision == "bf16"
        else contextlib.nullcontext
    )

    def run(steps: int) -> None:
        for i in range(steps):
            x, y = batches[i % NUM_BATCHES]
            with autocast():
                loss = F.cross_entropy(model(x), y)
            if accum > 1:
                loss = loss / accum
            loss.backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()

    return run


def accelerate_loop(precision: str, accum: int) -> Callable[[int], None]:
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision=precision, gradient_accumulation_steps=accum)
    model, optimizer = adamw_prepared(accelerator, make_model())
    batches = make_batches()

    def run(steps: int) -> None:
        accelerate_micro_steps(accelerator, model, optimizer, batches, steps)

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", default="no", choices=["no", "bf16"])
    parser.add_argument("--accum", type=int, default=1)
    args = one_process_args(parser)
    torch.manual_seed(0)
    measure_both_orders(
        lambda: raw_loop(args.precision, args.accum), lambda: accelerate_loop(args.precision, args.accum),
        args.accum, args.repeats, args.block, args.out,
    )  # fmt: skip


def one_process_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The worker's own options plus ``--block``, ``--repeats``, ``--out`` and ``--t0``; one torch thread."""
    parser.add_argument("--block", type=int, default=10, help="optimizer steps per repeat")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", required=True)
    parser.add_argument("--t0", type=float, default=0.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    return args


def measure_both_orders(
    make_raw: Callable[[], Callable[[int], None]],
    make_accel: Callable[[], Callable[[int], None]],
    accum: int,
    repeats: int,
    block: int,
    out_dir: str,
) -> None:
    """CPU seconds per optimizer step (``accum`` micro-steps) of each loop, the two alternating every
    optimizer step (:func:`common.alternate`, after 5 warm-up pairs: allocator, autograd graph caches),
    with the loops built in both orders, half the repeats each; writes rank0.json.

    Objects built first and second may land differently in memory (allocator, caches), so each loop
    is built first once and second once, and the one built first leads.
    """
    half = max(1, repeats // 2)
    raw, accel = make_raw(), make_accel()
    raw_times, accel_times = alternate(partial(raw, accum), partial(accel, accum), block, half, warmup=5)
    del raw, accel
    accel, raw = make_accel(), make_raw()
    accel_more, raw_more = alternate(partial(accel, accum), partial(raw, accum), block, half, warmup=5)
    result = {
        "raw": raw_times + raw_more,
        "accel": accel_times + accel_more,
        "unit": "cpu s per optimizer step",
    }
    Path(out_dir, "rank0.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
