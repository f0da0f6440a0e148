"""Sequence parallelism: a hand-written Ulysses loop vs ``Accelerator(parallelism_config=ParallelismConfig(sp_size=2))``.

``bench/_workers/sequence_worker.py`` (a causal LM of 2 blocks, width 256, 8 heads; sequence 1024, batch
2; AdamW; global-norm clipping; gloo, one thread per process) on 2 processes: each rank holds half of
every sequence in both loops; the hand-written loop slices the batch, shifts the labels before slicing,
exchanges q/k/v and the attention output with ``torch.distributed.nn.functional.all_to_all_single`` and
runs FSDP2 over the two ranks by hand. Both loops in the same torchrun processes, alternating step by
step. CPU seconds per optimizer step, ranks averaged; ratio raw time / accelerate time (>= 0.95).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import WORKERS_DIR, Row, guarded, main_for, raced_row

BENCH = "sequence-parallel"
METRIC = "steps/s, sp=2 causal LM, 2 procs (hand-written Ulysses loop vs Accelerator)"
WORKER = WORKERS_DIR / "sequence_worker.py"


def _rows() -> list[Row]:
    return [raced_row(BENCH, WORKER, METRIC, target=0.95)]


def run() -> list[Row]:
    return guarded(BENCH, "hand-written Ulysses loop vs Accelerator(sp_size=2)", _rows)


if __name__ == "__main__":
    main_for(BENCH, run)
