"""What the torchrun workers that race a hand-written loop against Accelerator share.

Each worker builds both loops in the same processes, then :func:`interleave` alternates them
optimizer step by optimizer step (which side goes first alternates too, so drift in the machine's
load hits both alike) and :func:`run_rank` does the process-group chores around it. The accelerate
side of every loop is the same few lines (:func:`adamw_prepared`, then :func:`accelerate_micro_steps`
or :func:`accelerate_step`), so a worker writes only its model, its data and its hand-written loop.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

Step = Callable[[], None]  # one optimizer step of one loop
Loop = Callable[[int, int], None]  # run(optimizer_steps, accumulation)


def alternate(
    first: Step, second: Step, steps: int, repeats: int, warmup: int
) -> tuple[list[float], list[float]]:
    """CPU seconds per call of ``first`` and of ``second``, per repeat; ``first`` leads on even calls."""
    clock = time.process_time
    for _ in range(warmup):
        first()
        second()
    out_first: list[float] = []
    out_second: list[float] = []
    for _ in range(repeats):
        a = b = 0.0
        for j in range(steps):
            lead, follow = (first, second) if j % 2 == 0 else (second, first)
            t0 = clock()
            lead()
            t1 = clock()
            follow()
            t2 = clock()
            if j % 2 == 0:
                a, b = a + t1 - t0, b + t2 - t1
            else:
                b, a = b + t1 - t0, a + t2 - t1
        out_first.append(a / steps)
        out_second.append(b / steps)
    return out_first, out_second


def interleave(raw: Step, accel: Step, steps: int, repeats: int, warmup: int = 2) -> dict[str, list[float]]:
    """CPU seconds per optimizer step of each loop, per repeat; the loops alternate every step."""
    raw_times, accel_times = alternate(raw, accel, steps, repeats, warmup)
    return {"raw": raw_times, "accel": accel_times}


def interleave_accumulations(
    raw: Loop, accel: Loop, accumulations: Sequence[int], steps: int, repeats: int, warmup: int = 2
) -> dict[str, dict[str, list[float]]]:
    """:func:`interleave` at each accumulation, under ``accum{K}``; ``steps`` optimizer steps per repeat
    at every accumulation (a repeat of accumulation 4 runs four times the micro-steps: fewer optimizer
    steps would leave each repeat's figure, and the row's median, noisier than the effect measured)."""
    out = {}
    for accum in accumulations:
        # One optimizer step of `accum` micro-steps per call, so the shared interleaving applies.
        raw_step, accel_step = functools.partial(raw, 1, accum), functools.partial(accel, 1, accum)
        out[f"accum{accum}"] = interleave(raw_step, accel_step, steps, repeats, warmup)
    return out


def adamw_prepared(accelerator: Any, model: torch.nn.Module) -> tuple[Any, Any]:
    """``model`` and an AdamW (lr 1e-3) over it, as ``accelerator.prepare`` returns them."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return accelerator.prepare(model, optimizer)


def accelerate_micro_steps(
    accelerator: Any,
    model: Any,
    optimizer: Any,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    count: int,
    max_norm: float | None = None,
) -> None:
    """``count`` micro-steps of the documented loop (cross entropy on ``batches`` in turn); the
    accelerator's ``gradient_accumulation_steps`` decides which of them step the optimizer."""
    for i in range(count):
        x, y = batches[i % len(batches)]
        with accelerator.accumulate(model):
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            if max_norm is not None and accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
            optimizer.zero_grad()


def accelerate_step(
    accelerator: Any, model: Any, optimizer: Any, loss: Callable[[], torch.Tensor], max_norm: float
) -> None:
    """One optimizer step of the documented loop with clipping; ``loss()`` runs the forward inside it."""
    with accelerator.accumulate(model):
        accelerator.backward(loss())
        accelerator.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        optimizer.zero_grad()


def accelerate_token_steps(
    accelerator: Any,
    model: Any,
    optimizer: Any,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    max_norm: float,
) -> Step:
    """The accelerate side of a token model's loop: each call one :func:`accelerate_step` on the next
    of ``batches`` (in turn), cross entropy over every token of ``model(x)`` against ``y``."""
    step = [0]

    def run() -> None:
        x, y = batches[step[0] % len(batches)]
        step[0] += 1
        accelerate_step(
            accelerator,
            model,
            optimizer,
            lambda: F.cross_entropy(model(x).flatten(0, 1), y.flatten()),
            max_norm,
        )

    return run


def parse_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The worker's own options plus the ones every worker takes (``--out`` and ``--t0`` from run_worker)."""
    parser.add_argument(
        "--steps", type=int, default=8, help="optimizer steps per repeat, at each accumulation"
    )
    # Ten: one launch's repeats are the row's only samples (five left a median that moved by more
    # than the 2% the rows judge from one idle run to the next).
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", required=True)
    parser.add_argument("--t0", type=float, required=True)
    return parser.parse_args()


def cpu_accelerator(repeats: int) -> tuple[argparse.Namespace, Any]:
    """The start of a worker that measures accelerate's own calls, under python or torchrun: options
    ``--repeats`` (default ``repeats``), ``--out``, ``--t0``; one torch thread; ``Accelerator(cpu=True)``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--out", required=True)
    parser.add_argument("--t0", type=float, default=0.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from accelerate import Accelerator

    return args, Accelerator(cpu=True)


def run_rank(out_dir: str, measure: Callable[[], dict[str, Any]]) -> None:
    """One thread, a gloo group, ``measure()``, this rank's JSON in ``out_dir``, then a clean exit."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    result = measure()
    Path(out_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


def race(
    make_raw: Callable[[argparse.Namespace], Step],
    make_accel: Callable[[argparse.Namespace], Step],
    parser: argparse.ArgumentParser | None = None,
) -> None:
    """A worker's whole ``main``: options, the two loops built (raw first), interleaved, written."""
    args = parse_args(parser or argparse.ArgumentParser())

    def measure() -> dict[str, Any]:
        raw, accel = make_raw(args), make_accel(args)
        return interleave(raw, accel, args.steps, args.repeats)

    run_rank(args.out, measure)
