"""Checkpoints: ~300 MB of model + AdamW state.

``save_state`` vs ``torch.save`` of the same state dicts + fsync (at most 1.0x their time with
accelerate's atomic commit on: staging folder, XXH3 of every byte, manifest, renames and directory
fsyncs); ``load_state`` (checksums verified) vs ``safetensors`` ``load_file`` + ``torch.load`` of the
same files (at least as fast; that raw side verifies nothing, so on a busy machine, where the XXH3
pass cannot overlap the reads on a spare core, the hash's own CPU time is what separates them), and
against the same raw loads after an XXH3 of both files, the same work a verified load does (at
least as fast); ``save_model`` vs ``safetensors.torch.save_file``; and the time
``save_state(async_save=True)`` blocks the loop vs a synchronous ``save_state`` (at most 0.25x, and
the folder it commits loads to the state at the call). Wall time, the operations alternating in one
process (``bench/_workers/checkpoint_worker.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import WORKERS_DIR, Row, guarded, main_for, python_cmd, run_worker, scratch_dir, seconds_row

BENCH = "checkpoint"
LABELS = {
    "save": "save_state vs torch.save x2 (+fsync)",
    "load": "load_state (verified) vs load_file + torch.load of its files + load_state_dict",
    "load_hashed": "load_state (verified) vs the same raw load + XXH3 of both files (the same work)",
    "save_model": "save_model vs safetensors save_file (+fsync)",
    "async": "save_state(async_save=True) blocking vs sync save_state",
}
# (operator, target, how the ratio reads where not the operator's default: see seconds_row)
TARGETS = {
    "save": ("<=", 1.0, ""),
    "load": (">=", 1.0, ""),
    "load_hashed": (">=", 1.0, ""),
    "save_model": (">=", 1.0, ""),
    "async": ("<=", 0.25, "async/sync time"),
}


def _rows() -> list[Row]:
    import safetensors  # noqa: F401

    import accelerate.checkpointing  # noqa: F401

    with scratch_dir("ckpt-") as scratch:
        (result,), _ = run_worker(
            [*python_cmd(WORKERS_DIR / "checkpoint_worker.py"), "--scratch", scratch], timeout=400
        )
    sizes = {name: result["model_bytes" if name == "save_model" else "bytes"] / 1e6 for name in LABELS}
    rows = []
    for name in LABELS:
        op, target, compare = TARGETS[name]
        note = ""
        if name == "async" and not result["async_loads_same"]:
            note = "FAILED CHECK: the committed folder did not load to the state at the call"
        metric = f"{LABELS[name]}, {sizes[name]:.0f} MB"
        row = seconds_row(BENCH, metric, result[name], op=op, target=target, compare=compare, note=note)
        if note:
            row.median = float("inf")  # a wrong checkpoint misses whatever its speed
        rows.append(row)
    return rows


def run() -> list[Row]:
    return guarded(BENCH, "save_state / load_state / save_model", _rows)


if __name__ == "__main__":
    main_for(BENCH, run)
