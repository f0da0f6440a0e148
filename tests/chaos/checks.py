"""What a chaos run must end with: the uninterrupted run's state, no process left, no mixed checkpoint."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import torch

from accelerate.checkpointing import latest_checkpoint, verify_checkpoint
from accelerate.checkpointing.project import checkpoints_root, list_checkpoints
from accelerate.storage.atomic import stale_entries


def compare_final(reference: Path, got: Path) -> list[str]:
    """Differences between two final states saved by the worker (empty: bitwise equal)."""
    if not got.is_file():
        return [f"the run left no final state ({got} is missing): it did not finish"]
    expected, actual = torch.load(reference), torch.load(got)
    problems: list[str] = []
    if expected["step"] != actual["step"]:
        problems.append(f"ended at optimizer step {actual['step']}, the reference at {expected['step']}")
    for index, (want, have) in enumerate(zip(expected["params"], actual["params"], strict=True)):
        if not torch.equal(want, have):
            diff = (want - have).abs().max().item()
            problems.append(f"parameter {index} {tuple(want.shape)} differs (max |diff| {diff:.3g})")
    for key, state in expected["optimizer"].items():
        for name, want in state.items():
            have = actual["optimizer"][key][name]
            if isinstance(want, torch.Tensor) and not torch.equal(want, have):
                problems.append(f"optimizer state {key}.{name} differs")
    return problems


def marked_processes(marker: str) -> list[int]:
    """Pids of live processes whose environment holds ``CHAOS_MARKER=marker`` (zombies excluded)."""
    needle = f"CHAOS_MARKER={marker}".encode()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # ended meanwhile, or not ours to read
        if state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def wait_until_gone(marker: str, timeout: float) -> list[int]:
    """Waits for every marked process to end; returns those still alive after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        alive = marked_processes(marker)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def kill_all(pids: list[int]) -> None:
    """Clean-up after a failed check: these are the run's own processes (found by its marker)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def check_checkpoints(project: Path, world_size: int) -> tuple[list[str], list[str]]:
    """(problems, notes): every ``checkpoint_*`` folder must verify against its manifest, and the newest
    must be the one ``load_state()`` would pick. Hidden staging folders of an interrupted save are
    never loaded (the next save removes them); they are listed as notes."""
    problems: list[str] = []
    folders = list_checkpoints(project)
    if not folders:
        problems.append(f"{checkpoints_root(project)} holds no checkpoint")
    for _, folder in folders:
        try:
            manifest = verify_checkpoint(folder)
        except Exception as exc:  # noqa: BLE001 - any failure to verify is the finding
            problems.append(f"{folder.name} does not verify: {exc}")
            continue
        if manifest.world_size != world_size:
            problems.append(f"{folder.name} was saved by {manifest.world_size} processes, not {world_size}")
    if folders and latest_checkpoint(project) != folders[-1][1]:
        problems.append(f"load_state() would resume from {latest_checkpoint(project)}, not {folders[-1][1]}")
    notes = [
        f"leftover of an interrupted save (never loaded): {p.name}"
        for p in stale_entries(checkpoints_root(project))
    ]
    return problems, notes
