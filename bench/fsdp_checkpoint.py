"""Sharded checkpoints, 2 processes: ``save_state`` of an FSDP2 model + AdamW vs raw ``dcp.save``.

``bench/_workers/fsdp_ckpt_worker.py`` under ``torchrun``: ~300 MB of sharded model and optimizer
state, saved both ways alternately in the same processes; wall time from a barrier to a barrier.
Ratio raw time / accelerate time (>= 0.95 with accelerate's checksums, random-state files, manifest
and atomic publish included).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    RESULTS_DIR,
    WORKERS_DIR,
    Row,
    compare_row,
    guarded,
    main_for,
    run_worker,
    speed_ratio,
    torchrun_cmd,
)

BENCH = "fsdp-checkpoint"
TARGET = 0.95


def _rows() -> list[Row]:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    # On the results disk, not /tmp (which may be memory-backed): fsync must reach a real disk.
    with tempfile.TemporaryDirectory(prefix="fsdp-ckpt-", dir=RESULTS_DIR) as scratch:
        results, _ = run_worker(
            torchrun_cmd(WORKERS_DIR / "fsdp_ckpt_worker.py", 2, "--scratch", scratch), timeout=300
        )
    result = results[0]
    return [
        compare_row(
            BENCH,
            f"sharded save_state vs dcp.save (model + optimizer), 2 processes, {result['bytes'] / 1e6:.0f} MB",
            result["save"]["raw"],
            result["save"]["accel"],
            combine=speed_ratio,
            compare="raw/acc time",
            op=">=",
            target=TARGET,
            unit="s",
        )
    ]


def run() -> list[Row]:
    return guarded(BENCH, "sharded save_state vs dcp.save", _rows)


if __name__ == "__main__":
    main_for(BENCH, run)
