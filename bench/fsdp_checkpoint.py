"""Sharded checkpoints, 2 processes: ``save_state`` of an FSDP2 model + AdamW vs raw ``dcp.save``.

``bench/_workers/fsdp_ckpt_worker.py`` under ``torchrun``: ~300 MB of sharded model and optimizer
state, saved both ways alternately in the same processes; wall time from a barrier to a barrier.
Ratio raw time / accelerate time (>= 0.95 with accelerate's checksums, random-state files, manifest
and atomic publish included).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    WORKERS_DIR,
    Row,
    guarded,
    main_for,
    run_worker,
    scratch_dir,
    seconds_row,
    torchrun_cmd,
)

BENCH = "fsdp-checkpoint"
TARGET = 0.95


def _rows() -> list[Row]:
    with scratch_dir("fsdp-ckpt-") as scratch:
        results, _ = run_worker(
            torchrun_cmd(WORKERS_DIR / "fsdp_ckpt_worker.py", 2, "--scratch", scratch), timeout=300
        )
    result = results[0]
    metric = (
        f"sharded save_state vs dcp.save (model + optimizer), 2 processes, {result['bytes'] / 1e6:.0f} MB"
    )
    return [seconds_row(BENCH, metric, result["save"], op=">=", target=TARGET)]


def run() -> list[Row]:
    return guarded(BENCH, "sharded save_state vs dcp.save", _rows)


if __name__ == "__main__":
    main_for(BENCH, run)
