"""N-D parallelism: hand-written DTensor loops vs the same loops through ``Accelerator(parallelism_config=...)``.

``bench/_workers/parallel_worker.py`` (4 attention + MLP blocks of width 256, sequence 32, batch 8
per data shard; AdamW; global-norm clipping; gloo, one thread per process): TP=2 on 2 processes
(``parallelize_module`` vs the same plan prepared by accelerate) and dp_shard=2 x TP=2 on 4
processes (``parallelize_module`` + ``fully_shard`` vs accelerate), both loops in the same torchrun
processes, alternating step by step. CPU seconds per optimizer step, ranks averaged; ratio raw time
/ accelerate time (>= 0.98).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import WORKERS_DIR, Row, guarded, main_for, raced_row

BENCH = "parallel-nd"
WORKER = WORKERS_DIR / "parallel_worker.py"
CASES = (
    ("TP=2, 2 procs (parallelize_module loop vs Accelerator)", 2, ("--tp", "2")),
    ("dp_shard=2 x TP=2, 4 procs (parallelize_module + fully_shard vs Accelerator)", 4, ("--dp_shard", "2", "--tp", "2")),
)  # fmt: skip


def _rows() -> list[Row]:
    import torch.distributed.tensor.parallel  # noqa: F401  (DTensor tensor parallelism must exist)

    rows = []
    for label, procs, args in CASES:
        rows.append(raced_row(BENCH, WORKER, f"steps/s, {label}", procs=procs, args=args))
    return rows


def run() -> list[Row]:
    return guarded(
        BENCH, "hand-written DTensor TP / TP+FSDP loops vs Accelerator(parallelism_config=...)", _rows
    )


if __name__ == "__main__":
    main_for(BENCH, run)
