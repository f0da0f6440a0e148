"""What the torchrun workers that race a hand-written loop against Accelerator share.

Each worker builds both loops in the same processes, then :func:`interleave` alternates them
optimizer step by optimizer step (which side goes first alternates too, so drift in the machine's
load hits both alike) and :func:`run_rank` does the process-group chores around it.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Step = Callable[[], None]  # one optimizer step of one loop


def interleave(raw: Step, accel: Step, steps: int, repeats: int, warmup: int = 2) -> dict[str, list[float]]:
    """CPU seconds per optimizer step of each loop, per repeat; the loops alternate every step."""
    clock = time.process_time
    for _ in range(warmup):
        raw()
        accel()
    out: dict[str, list[float]] = {"raw": [], "accel": []}
    for _ in range(repeats):
        r = a = 0.0
        for j in range(steps):
            first, second = (raw, accel) if j % 2 == 0 else (accel, raw)
            t0 = clock()
            first()
            t1 = clock()
            second()
            t2 = clock()
            if j % 2 == 0:
                r, a = r + t1 - t0, a + t2 - t1
            else:
                a, r = a + t1 - t0, r + t2 - t1
        out["raw"].append(r / steps)
        out["accel"].append(a / steps)
    return out


def parse_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The worker's own options plus the ones every worker takes (``--out`` and ``--t0`` from run_worker)."""
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", required=True)
    parser.add_argument("--t0", type=float, required=True)
    return parser.parse_args()


def run_rank(out_dir: str, measure: Callable[[], dict[str, Any]]) -> None:
    """One thread, a gloo group, ``measure()``, this rank's JSON in ``out_dir``, then a clean exit."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    result = measure()
    Path(out_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()
