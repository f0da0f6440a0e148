"""fp8 through torchao: a training step via ``Accelerator(mixed_precision="fp8")`` vs the same model
hand-converted with torchao's ``convert_to_float8_training`` under bf16 autocast.

MLP 512-512-512-10 (the middle linear in float8), batch 64, AdamW, one torch thread, in a fresh
process (``bench/_workers/fp8_worker.py``) that alternates the two loops every optimizer step. The
ratio is raw CPU time per step over accelerate's (>= 0.98: at most 2% slower). torchao's float8 is
emulated on CPU, so the absolute times say nothing about GPU speed; the ratio is the overhead.
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
    python_cmd,
    run_worker,
    skipped,
    speed_ratio,
)

BENCH = "fp8_ao"
TARGET = 0.98
METRIC = "step time, fp8 (torchao), vs hand-converted torchao"


def _measure() -> list[Row]:
    if importlib.util.find_spec("torchao") is None:
        return [skipped(BENCH, METRIC, "torchao is not installed")]
    (result,), _ = run_worker(python_cmd(WORKERS_DIR / "fp8_worker.py"), timeout=300)
    return [
        compare_row(
            BENCH, METRIC, result["raw"], result["accel"], combine=speed_ratio, compare="raw/acc time",
            op=">=", target=TARGET, unit="ms/opt step", scale=1000,
        )
    ]  # fmt: skip


def run() -> list[Row]:
    return guarded(BENCH, METRIC, _measure)


if __name__ == "__main__":
    main_for(BENCH, run)
