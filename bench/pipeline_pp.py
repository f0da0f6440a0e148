"""Pipeline-parallel training: a hand-written ``torch.distributed.pipelining`` loop vs ``pp_size=2``.

``bench/_workers/pipeline_worker.py`` (4 MLP blocks of width 256, batch 16 in 4 micro-batches, AdamW,
1F1B; gloo, one thread per process): both loops in the same 2 torchrun processes, alternating step
by step. CPU seconds per optimizer step, ranks averaged; ratio raw time / accelerate time (>= 0.95).
Then one info row per schedule: the bubble, the share of a step's wall time a rank spends waiting
(1 - CPU / wall, ranks averaged; the formula for GPipe and 1F1B is (p - 1) / (m + p - 1) = 0.2 here;
on a loaded machine the wall time also holds the time other processes run, so read it as an upper bound).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import WORKERS_DIR, Row, guarded, main_for, run_worker, step_time_row, torchrun_cmd

BENCH = "pipeline-pp"
WORKER = WORKERS_DIR / "pipeline_worker.py"
SCHEDULES = ("GPipe", "1F1B", "Interleaved1F1B")


def _rows() -> list[Row]:
    import torch.distributed.pipelining  # noqa: F401  (torch's pipeline schedules must exist)

    results, _ = run_worker(torchrun_cmd(WORKER, 2), timeout=600)
    row = step_time_row(
        BENCH, "steps/s, pp=2 1F1B, 2 procs (torch.distributed.pipelining loop vs Accelerator)",
        [r["raw"] for r in results], [r["accel"] for r in results],
    )  # fmt: skip
    row.target = 0.95
    rows = [row]
    for schedule in SCHEDULES:
        share = sum(r[f"bubble {schedule}"] for r in results) / len(results)
        rows.append(Row(BENCH, f"pipeline bubble, {schedule}, pp=2, 4 micro-batches", unit="share of step",
                        accel=share, median=share, low=share, high=share, stat="ratio", compare="1 - cpu/wall", repeats=1))  # fmt: skip
    return rows


def run() -> list[Row]:
    return guarded(BENCH, "hand-written torch.distributed.pipelining loop vs Accelerator(pp_size=2)", _rows)


if __name__ == "__main__":
    main_for(BENCH, run)
