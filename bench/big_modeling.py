"""Big-model inference: hook overhead, checkpoint loading, disk offload (``bench/_workers/big_model_worker.py``).

- forward through ``dispatch_model`` hooks (all on the CPU) vs the bare model: raw/acc CPU time >= 0.97;
- ``load_checkpoint_and_dispatch`` into an empty model vs a meta-built model + ``load_file`` +
  ``load_state_dict(assign=True)``, each then running one forward: raw/acc wall time to the first
  output >= 0.95 (both map the file); the note gives each side's peak RSS (fresh process per
  measurement, median), which should not be higher for ours;
- forward with every block offloaded to disk (read from the checkpoint's safetensors file) vs a
  hand-written loop reading each block's weights from the same file: raw/acc CPU time >= 0.9.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import WORKERS_DIR, Row, compare_row, guarded, main_for, python_cmd, run_worker, speed_ratio

BENCH = "big model"


def _rows() -> list[Row]:
    (result,), _ = run_worker(python_cmd(WORKERS_DIR / "big_model_worker.py"), timeout=170)
    mb = result["model_bytes"] / 1e6
    hooks, load, disk = result["hooks"], result["load"], result["disk"]
    return [
        compare_row(BENCH, f"forward through dispatch hooks vs bare model, {mb:.0f} MB", hooks["raw"],
                    hooks["accel"], combine=speed_ratio, compare="raw/acc time", op=">=", target=0.97,
                    unit="ms", scale=1000),
        compare_row(BENCH, f"load_checkpoint_and_dispatch vs load_file + load_state_dict(assign), + 1 forward, {mb:.0f} MB",
                    load["raw"], load["accel"], combine=speed_ratio, compare="raw/acc time", op=">=", target=0.95,
                    unit="s", note=_rss_note(result["rss"])),
        compare_row(BENCH, "disk-offloaded forward vs hand-written safe_open loop over the same file",
                    disk["raw"], disk["accel"], combine=speed_ratio, compare="raw/acc time", op=">=", target=0.9,
                    unit="ms", scale=1000),
    ]  # fmt: skip


def _rss_note(rss: dict[str, list[dict[str, int]]]) -> str:
    """Peak RSS of each side (MB, median over fresh processes) and its rise over the RSS before loading."""

    def mb(side: str, key: str) -> float:
        values = [r["peak_kb"] - (r["before_kb"] if key == "rise" else 0) for r in rss[side]]
        return statistics.median(values) * 1024 / 1e6

    return (f"peak RSS, fresh process each (after one unmeasured load), median of {len(rss['raw'])}: "
            f"load_file {mb('raw', 'peak'):.1f} MB, +{mb('raw', 'rise'):.1f} MB over the pre-load RSS; "
            f"ours {mb('accel', 'peak'):.1f} MB, +{mb('accel', 'rise'):.1f} MB; both map the file, "
            "ours copies only what it casts or moves")  # fmt: skip


def run() -> list[Row]:
    return guarded(BENCH, "(big-model benchmark)", _rows)


if __name__ == "__main__":
    main_for("big_modeling", run)
