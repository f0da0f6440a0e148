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

from bench.common import WORKERS_DIR, Row, guarded, main_for, run_worker, step_time_row, torchrun_cmd

BENCH = "fsdp2-2proc"
WORKER = WORKERS_DIR / "fsdp_worker.py"


def _rows() -> list[Row]:
    import torch.distributed.fsdp  # noqa: F401  (FSDP2 must exist)

    results, _ = run_worker(torchrun_cmd(WORKER, 2), timeout=300)
    rows = []
    for accum in (1, 4):
        raw, accel = (
            [r[f"accum{accum}"]["raw"] for r in results],
            [r[f"accum{accum}"]["accel"] for r in results],
        )
        metric = f"steps/s, accumulation {accum} (fully_shard loop vs Accelerator, alternating)"
        rows.append(step_time_row(BENCH, metric, raw, accel))
    return rows


def run() -> list[Row]:
    return guarded(BENCH, "hand-written fully_shard vs Accelerator(fsdp_plugin=...)", _rows)


if __name__ == "__main__":
    main_for(BENCH, run)
