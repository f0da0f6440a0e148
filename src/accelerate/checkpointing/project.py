"""Automatic checkpoint naming (``project_dir/checkpoints/checkpoint_{i}``) and rotation.

Which folder is "latest": the highest-numbered *committed* checkpoint (one with our manifest).
Folders without a manifest are considered only when no committed one exists at all, and then only
if they hold upstream Accelerate's files; that lets a run saved by upstream resume here, while a
folder left half-written by a crash (upstream has no manifest either) can never shadow a complete
checkpoint of ours. Our own interrupted saves never appear under a ``checkpoint_{i}`` name at all:
they live in hidden staging folders until committed; and a folder without a manifest that carries
our traces (see :func:`own_traces`) is never taken. A ``checkpoint_{i}`` that an older version's
interrupted replacement left only as ``.checkpoint_{i}.old-accelerate`` still counts (loading it
reads the hidden folder).

Rotation runs after the new checkpoint is committed (and, in multi-process runs, after every rank
has confirmed it), so at no moment are there fewer than ``total_limit`` complete checkpoints.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from accelerate.storage.atomic import (
    OLD_SUFFIX,
    checkpoint_folder,
    interrupted_merge,
    is_committed,
    remove_tree,
    stale_entries,
)
from accelerate.storage.durable_io import MANIFEST_NAME

CHECKPOINTS_DIRNAME = "checkpoints"
_NAME = re.compile(r"^checkpoint_(\d+)$")
_OLD_NAME = re.compile(rf"^\.(checkpoint_\d+){re.escape(OLD_SUFFIX)}$")
# Files any upstream or own checkpoint contains; used to recognise folders without a manifest.
_ARTIFACT = re.compile(
    r"^(model(_\d+)?\.safetensors|pytorch_model(_\d+)?\.bin|optimizer(_\d+)?\.bin|scheduler(_\d+)?\.bin"
    r"|random_states_\d+\.pkl|custom_checkpoint_\d+\.pkl|scaler\.pt|(dl_state_dict|sampler)(_\d+)?\.bin)$"
)


def checkpoints_root(project_dir: str | os.PathLike[str]) -> Path:
    return Path(project_dir) / CHECKPOINTS_DIRNAME


def checkpoint_dir(project_dir: str | os.PathLike[str], iteration: int) -> Path:
    """``project_dir/checkpoints/checkpoint_{iteration}``."""
    if iteration < 0:
        raise ValueError(f"checkpoint iteration must be >= 0, got {iteration}")
    return checkpoints_root(project_dir) / f"checkpoint_{iteration}"


def list_checkpoints(project_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """Every ``checkpoint_{i}`` folder (committed or not), oldest first."""
    root = checkpoints_root(project_dir)
    if not root.is_dir():
        return []
    found = {p.name: p for p in root.iterdir() if _NAME.match(p.name) and p.is_dir()}
    for entry in root.iterdir():
        # Only the hidden previous copy of an interrupted replacement is left: it is that checkpoint.
        if (m := _OLD_NAME.match(entry.name)) and m.group(1) not in found and entry.is_dir():
            found[m.group(1)] = root / m.group(1)
    return sorted((int(name.split("_")[1]), path) for name, path in found.items())


def looks_like_checkpoint(directory: str | os.PathLike[str]) -> bool:
    """True when a folder holds at least one file with a training-state artifact name."""
    path = Path(directory)
    return path.is_dir() and any(_ARTIFACT.match(entry.name) for entry in path.iterdir())


def own_traces(folder: Path) -> str | None:
    """Why a folder without a manifest is one of ours whose manifest is missing, or None.

    Such a folder is refused: its save did not complete (an older version's interrupted commit left
    its staging folder beside it) or its manifest was removed (our random-states files carry a
    marker upstream's do not), so nothing vouches for its files.
    """
    from accelerate.checkpointing.rng import OWN_MARKER, load_rng_file

    staging = interrupted_merge(folder)
    if staging is not None:
        return f"an interrupted save left {staging} beside it"
    rng_files = sorted(folder.glob("random_states_*.pkl"))
    if rng_files:
        try:
            marked = OWN_MARKER in load_rng_file(rng_files[0])
        except Exception:  # noqa: BLE001 - unreadable: loading reports it, naming the file
            return None
        if marked:
            return f"{rng_files[0].name} was written by accelerate, which always writes {MANIFEST_NAME} last"
    return None


def latest_checkpoint(project_dir: str | os.PathLike[str]) -> Path | None:
    """The checkpoint ``load_state()`` resumes from (see the module docstring), or None."""
    checkpoints = list_checkpoints(project_dir)
    for _, path in reversed(checkpoints):
        if is_committed(path):
            return path
    for _, path in reversed(checkpoints):
        if looks_like_checkpoint(path) and own_traces(path) is None:
            return path
    return None


def next_iteration(project_dir: str | os.PathLike[str]) -> int:
    """One past the highest existing checkpoint number (0 for a fresh project)."""
    checkpoints = list_checkpoints(project_dir)
    return checkpoints[-1][0] + 1 if checkpoints else 0


def rotate_checkpoints(
    project_dir: str | os.PathLike[str], total_limit: int | None, *, keep: Path | None = None
) -> list[Path]:
    """Removes the oldest checkpoints so at most ``total_limit`` remain; returns the removed folders.

    Call on the main process only, after the newest checkpoint is committed on every rank
    (``save_training_state`` returning means exactly that). ``keep`` (the one just written) is never
    removed. Each removal renames the folder to a hidden name first, so a crash mid-removal cannot
    leave a partial folder that looks like a checkpoint. Leftover staging folders are cleared too.
    """
    root = checkpoints_root(project_dir)
    for entry in stale_entries(root):
        shutil.rmtree(entry, ignore_errors=True)
    if total_limit is None:
        return []
    if total_limit < 1:
        raise ValueError(f"total_limit must be >= 1 or None, got {total_limit}")
    keep_resolved = keep.absolute() if keep is not None else None
    checkpoints = [p for _, p in list_checkpoints(project_dir)]
    excess = len(checkpoints) - total_limit
    removed: list[Path] = []
    for path in checkpoints:
        if len(removed) >= excess:
            break
        if path.absolute() == keep_resolved:
            continue
        remove_tree(checkpoint_folder(path))
        removed.append(path)
    return removed
