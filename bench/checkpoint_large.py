"""A checkpoint bigger than the page cache keeps dirty: ~2.4 GB of model + AdamW state.

``save_state`` vs ``torch.save`` of the same two state dicts, each file flushed and fsynced (at most
1.0x their time): at this size the kernel starts writing back while the files are still being
written, so the rows measure the disk, not memory copies, and whether checksums, the manifest and the
folder commit stay hidden behind it. Wall time, the two alternating in one process
(``bench/_workers/checkpoint_worker.py`` with a 4096-wide, 12-layer model: 201 M fp32 parameters).
Part of ``make bench`` only (about a minute, 2.4 GB of memory and of disk), never of ``make test``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import WORKERS_DIR, Row, guarded, main_for, python_cmd, run_worker, scratch_dir, seconds_row

BENCH = "checkpoint-large"
WIDTH, LAYERS = 4096, 12  # 12 x 16.8 M parameters = 805 MB fp32; with AdamW's two moments 2.4 GB
TARGET = 1.0


def _rows() -> list[Row]:
    import accelerate.checkpointing  # noqa: F401

    with scratch_dir("ckpt-large-") as scratch:
        cmd = [*python_cmd(WORKERS_DIR / "checkpoint_worker.py"), "--scratch", scratch]
        cmd += ["--width", str(WIDTH), "--layers", str(LAYERS), "--only", "save", "--repeats", "4"]
        (result,), _ = run_worker(cmd, timeout=600)
    metric = f"save_state vs torch.save x2 (+fsync), {result['bytes'] / 1e9:.1f} GB"
    return [seconds_row(BENCH, metric, result["save"], op="<=", target=TARGET)]


def run() -> list[Row]:
    return guarded(BENCH, "save_state of a 2.4 GB state", _rows)


if __name__ == "__main__":
    main_for(BENCH, run)
