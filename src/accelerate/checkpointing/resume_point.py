"""Which checkpoint ``load_state`` resumes from, agreed by every process, and where saving goes on.

``load_state(missing_ok=True)`` lets one script serve the first start and every restart: it loads
the newest committed checkpoint, or does nothing when there is none yet. Every process must then
take the same branch (one loading, another starting fresh would pair different collectives), so
the processes compare what each of them found with one small collective and refuse to go on when
they disagree (a project folder that is not shared, or not yet visible, on some machine).
"""

from __future__ import annotations

import os
from pathlib import Path

from accelerate.checkpointing.project import checkpoints_root, latest_checkpoint, next_iteration
from accelerate.collectives.agreement import agree_on_failure
from accelerate.storage.atomic import checkpoint_folder
from accelerate.storage.errors import CheckpointError


def find_resume_checkpoint(
    project_dir: str | os.PathLike[str] | None, input_dir: str | None, *, missing_ok: bool
) -> Path | None:
    """The folder to load: ``input_dir``, or the newest committed checkpoint under ``project_dir``.

    Args:
        project_dir: the project folder when automatic checkpoint naming applies, else None.
        input_dir: the folder the caller named (used when ``project_dir`` is None).
        missing_ok: return None when there is nothing to load instead of raising.

    Returns:
        The folder, or None (only with ``missing_ok``) when it does not exist (``input_dir``) or no
        committed checkpoint exists yet (``project_dir``).

    Raises:
        FileNotFoundError: nothing to load, without ``missing_ok``.
        CheckpointError: the processes found different checkpoints (every process raises).
    """
    seen: str | bool | None
    if project_dir is not None:
        found = latest_checkpoint(project_dir)
        where = f"under {checkpoints_root(project_dir)}"
        # Compare names: the same shared folder may be mounted at different paths on each machine.
        seen = found.name if found is not None else None
    else:
        if input_dir is None:
            raise ValueError("find_resume_checkpoint needs project_dir or input_dir")
        # A file there is not "nothing yet": it goes to the loader, which says it is not a folder. An
        # empty folder is (a job script may create its output folder before the first start); a
        # folder holding anything else goes to the loader too, which names what a checkpoint holds.
        folder = checkpoint_folder(input_dir)
        found = Path(input_dir) if folder.exists() and not _is_empty_folder(folder) else None
        where = f"at {input_dir}"
        seen = found is not None
    if not missing_ok:
        # Without missing_ok the path is as before: the loader itself reports a missing folder.
        if project_dir is not None and found is None:
            raise FileNotFoundError(f"No committed checkpoint {where} to load")
        return found if found is not None else Path(str(input_dir))
    views = agree_on_failure(None, what="load_state(missing_ok=True)", payload=seen)
    if len(set(views)) > 1:
        each = "; ".join(f"rank {rank}: {_describe(view)}" for rank, view in enumerate(views))
        raise CheckpointError(
            f"load_state(missing_ok=True): the processes see different checkpoints {where} ({each}), so "
            "some would resume and others start fresh. Put the project folder on storage every "
            "machine shares (or wait until it is visible everywhere), or load a folder by name."
        )
    return found


def _is_empty_folder(path: Path) -> bool:
    return path.is_dir() and next(path.iterdir(), None) is None


def _describe(view: object) -> str:
    if view is None or view is False:
        return "none"
    return "found" if view is True else str(view)


def iteration_after(project_dir: str | os.PathLike[str], loaded: Path | None, configured: int) -> int:
    """The number the next automatically named checkpoint gets.

    One past the loaded checkpoint, and never the number of a folder that already exists (a later
    ``checkpoint_{i}`` that is not committed, so was not loaded): saving must not collide with it.
    With nothing loaded, the configured iteration unless such folders are in the way.
    """
    start = configured
    if loaded is not None and loaded.name.startswith("checkpoint_") and loaded.name[11:].isdigit():
        start = int(loaded.name[11:]) + 1
    return max(start, next_iteration(project_dir))
