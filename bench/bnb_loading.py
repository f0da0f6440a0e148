"""Quantized-model loading (``bench/_workers/bnb_worker.py``): ``load_and_quantize_model`` vs bitsandbytes'
own replace-and-load (layers built in memory, ``load_state_dict``, ``.to()`` quantizes) of the same
safetensors checkpoint, each ending with one forward: raw/acc wall time >= 0.95, in 8-bit and 4-bit nf4.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import WORKERS_DIR, Row, compare_row, guarded, main_for, python_cmd, run_worker, speed_ratio

BENCH = "bnb loading"


def _rows() -> list[Row]:
    (result,), _ = run_worker(python_cmd(WORKERS_DIR / "bnb_worker.py"), timeout=300)
    mb = result["model_bytes"] / 1e6
    return [
        compare_row(BENCH, f"load_and_quantize_model {width} vs bitsandbytes replace + load_state_dict + .to(), "
                    f"{mb:.0f} MB fp32", result[width]["raw"], result[width]["accel"], combine=speed_ratio,
                    compare="raw/acc time", op=">=", target=0.95, unit="s")
        for width in ("8bit", "4bit")
    ]  # fmt: skip


def run() -> list[Row]:
    return guarded(BENCH, "(bitsandbytes loading benchmark)", _rows)


if __name__ == "__main__":
    main_for("bnb_loading", run)
