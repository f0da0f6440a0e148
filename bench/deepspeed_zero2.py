"""Two processes, DeepSpeed ZeRO-2 on CPU: the raw engine loop vs the same loop through ``Accelerator``.

``bench/_workers/deepspeed_worker.py`` (MLP 512-512-10, batch 64 per rank, AdamW as DeepSpeed's client
optimizer, gloo, one thread per process) builds both engines in the same two processes and alternates
them optimizer step by optimizer step. Ratio raw time / accelerate time per optimizer step (>= 0.98).
"""

from __future__ import annotations

import importlib.util
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
    skipped,
    speed_ratio,
    torchrun_cmd,
)

BENCH = "deepspeed"
WORKER = WORKERS_DIR / "deepspeed_worker.py"


def _rows() -> list[Row]:
    if importlib.util.find_spec("deepspeed") is None:
        return [skipped(BENCH, "ZeRO-2 step, raw engine vs accelerate", "deepspeed is not installed")]
    results, _ = run_worker(torchrun_cmd(WORKER, 2), timeout=600)
    series = [r["accum1"] for r in results]
    raw = [sum(values) / len(values) for values in zip(*(s["raw"] for s in series), strict=True)]
    accel = [sum(values) / len(values) for values in zip(*(s["accel"] for s in series), strict=True)]
    return [
        compare_row(
            BENCH,
            "ZeRO-2 steps/s, 2 CPU processes (CPU per optimizer step, raw engine and accelerate alternating)",
            raw,
            accel,
            combine=speed_ratio,
            compare="raw/acc time",
            op=">=",
            target=0.98,
            unit="ms/opt step",
            scale=1000,
        )
    ]


def run() -> list[Row]:
    return guarded(BENCH, "DeepSpeed ZeRO-2: raw engine vs Accelerator", _rows)


if __name__ == "__main__":
    main_for(BENCH, run)
