"""Expert parallelism: a hand-written all-to-all MoE loop vs ``Accelerator(parallelism_config=ParallelismConfig(ep_size=2))``.

``bench/_workers/expert_worker.py`` (2 MoE layers of width 256, 8 experts of width 512, top-2; sequence
64, batch 8 per rank; AdamW; global-norm clipping; gloo, one thread per process) on 2 processes: each
rank holds 4 experts in both loops; the hand-written loop exchanges counts then tokens with
``torch.distributed.nn.functional.all_to_all_single`` and runs FSDP2 over the other weights by hand.
Both loops in the same torchrun processes, alternating step by step. CPU seconds per optimizer step,
ranks averaged; ratio raw time / accelerate time (>= 0.95).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import WORKERS_DIR, Row, guarded, main_for, raced_row

BENCH = "expert-parallel"
METRIC = "steps/s, ep=2 MoE, 2 procs (hand-written all-to-all loop vs Accelerator)"
WORKER = WORKERS_DIR / "expert_worker.py"


def _rows() -> list[Row]:
    return [raced_row(BENCH, WORKER, METRIC, target=0.95)]


def run() -> list[Row]:
    return guarded(BENCH, "hand-written all-to-all MoE loop vs Accelerator(ep_size=2)", _rows)


if __name__ == "__main__":
    main_for(BENCH, run)
