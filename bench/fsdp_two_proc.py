"""Two processes, FSDP2: a hand-written ``fully_shard`` loop vs the same loop through ``Accelerator``.

``bench/_workers/fsdp_worker.py`` (4 residual MLP blocks of width 256 sharded per block, then the root;
batch 32 per rank; AdamW; clipping; gloo, one thread per process) builds both loops in the same
torchrun processes and alternates them optimizer step by optimizer step, at accumulation 1 and 4.
CPU seconds per optimizer step, ranks averaged; ratio raw time / accelerate time = accelerate's
steps/s over the hand-written loop's (>= 0.98).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    WORKERS_DIR,
    Row,
    compare_row,
    guarded,
    main_for,
    run_worker,
    speed_ratio,
    torchrun_cmd,
)

BENCH = "fsdp2-2proc"
WORKER = WORKERS_DIR / "fsdp_worker.py"


def _rank_mean(results: list[dict], accum: int, side: str) -> list[float]:
    series = [r[f"accum{accum}"][side] for r in results]
    return [sum(values) / len(values) for values in zip(*series, strict=True)]


def _rows() -> list[Row]:
    import torch.distributed.fsdp  # noqa: F401  (FSDP2 must exist)

    results, _ = run_worker(torchrun_cmd(WORKER, 2), timeout=300)
    rows = []
    for accum in (1, 4):
        rows.append(
            compare_row(
                BENCH,
                f"steps/s, accumulation {accum} (fully_shard loop vs Accelerator, alternating)",
                _rank_mean(results, accum, "raw"),
                _rank_mean(results, accum, "accel"),
                combine=speed_ratio,
                compare="raw/acc time",
                op=">=",
                target=0.98,
                unit="ms/opt step",
                scale=1000,
            )
        )
    return rows


def run() -> list[Row]:
    return guarded(BENCH, "hand-written fully_shard vs Accelerator(fsdp_plugin=...)", _rows)


if __name__ == "__main__":
    main_for(BENCH, run)
