"""What a resumed process says about the checkpoint it continues from (elastic and restarted runs).

When torch's elastic agent re-forms the group (a node left or joined, or a process failed), every
process starts the script again and ``load_state(missing_ok=True)`` resumes from the newest
committed checkpoint. Process 0 then prints one line: the checkpoint, the world size it was saved
at and the one it resumes on, and how many optimizer steps trained since that checkpoint are lost
and trained again ("replayed").

The replayed count needs the step the previous group had reached. Each process keeps its
optimizer-step count (the hang watchdog's ``SLOT.step``, which checkpoints save and restore), and
when it ends abnormally — an exception (a peer died in a collective) or the agent's SIGTERM (the
group re-forms) — it writes that count to a small file beside the checkpoints
(``.accelerate-progress-PID``); the next process 0 reads and removes them. The checkpoints folder
is where every node looks for checkpoints, so it is shared by the nodes that resume. Each
Accelerator keeps that folder in its :class:`ProgressRecord`.
"""

from __future__ import annotations

import os
from pathlib import Path

from accelerate.diagnostics.watchdog import SLOT
from accelerate.state.gradient import GradientState

PROGRESS_PREFIX = ".accelerate-progress-"
# Set by torch's agent in every process it starts: the line is for launched runs only.
_AGENT_VARIABLE = "TORCHELASTIC_RUN_ID"


class ProgressRecord:
    """Where one Accelerator's checkpoints live, known once it saved or loaded one.

    Each Accelerator owns one (made on its first ``save_state`` / ``load_state``). The progress
    record is written from an exception or the agent's SIGTERM, where no Accelerator is at hand
    (``accelerate.launch.bootstrap``), so every save or load also makes its record the *active*
    one: :func:`record_progress` writes the record of the Accelerator that saved or loaded last.
    """

    def __init__(self) -> None:
        self.checkpoints_dir: Path | None = None

    def note_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Remembers the folder holding checkpoint ``path``, and makes this the active record."""
        global _active
        self.checkpoints_dir = Path(path).resolve().parent
        _active = self

    def write(self) -> None:
        """Writes this process's optimizer-step count beside the checkpoints (best effort, never raises)."""
        if self.checkpoints_dir is None or _AGENT_VARIABLE not in os.environ:
            return
        if int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) <= 0:
            return  # no group will resume to read it: leave nothing behind
        try:
            (self.checkpoints_dir / f"{PROGRESS_PREFIX}{os.getpid()}").write_text(str(int(SLOT.step)))
        except OSError:
            pass

    def resume_line(
        self, path: str | os.PathLike[str], saved_world: int | None, world: int, saved_steps: int
    ) -> str:
        """The line process 0 prints after resuming (and removes the previous group's progress records)."""
        self.note_checkpoint(path)
        assert self.checkpoints_dir is not None  # just set
        reached = _reached_steps(self.checkpoints_dir)
        saved_by = (
            f"{saved_world} process{'es' if saved_world != 1 else ''}" if saved_world else "? processes"
        )
        replayed = (
            f"{max(reached - saved_steps, 0)} optimizer step(s) replayed since it"
            if reached is not None
            else "optimizer steps replayed since it: unknown (the previous processes left no record)"
        )
        line = (
            f"accelerate: resumed from {path} (saved by {saved_by} at optimizer step {saved_steps}) "
            f"on {world} process{'es' if world != 1 else ''}; {replayed}"
        )
        return line + batch_rule(saved_world, world)

    def report_resume(
        self, path: str | os.PathLike[str], saved_world: int | None, world: int, is_main: bool
    ) -> None:
        """Prints :meth:`resume_line` on process 0 of a launched run (to stderr, where the launcher logs)."""
        self.note_checkpoint(path)
        if not is_main or _AGENT_VARIABLE not in os.environ:
            return
        import sys

        # One write with its newline: a worker's stderr on a pipe is unbuffered, so print() would
        # write the text and the newline apart and the script's next stdout line could land between.
        sys.stderr.write(self.resume_line(path, saved_world, world, int(SLOT.step)) + "\n")
        sys.stderr.flush()


# The record of the Accelerator that saved or loaded last: what an abnormal end writes. A reference
# here because the bootstrap's exception and SIGTERM handlers run with no Accelerator at hand.
_active: ProgressRecord | None = None


def record_progress() -> None:
    """Writes the active record (the bootstrap's handlers call it); nothing before any save or load."""
    if _active is not None:
        _active.write()


def _reached_steps(directory: Path) -> int | None:
    """The highest count the previous group recorded (None: none recorded); the records are removed."""
    reached: int | None = None
    for path in directory.glob(f"{PROGRESS_PREFIX}*"):
        try:
            value = int(path.read_text().strip() or "0")
            path.unlink()
        except (OSError, ValueError):
            continue
        reached = value if reached is None else max(reached, value)
    return reached


def batch_rule(saved_world: int | None, world: int) -> str:
    """What happens to the global batch at the new world size (empty when the size did not change)."""
    if not saved_world or saved_world == world:
        return ""
    steps = GradientState().num_steps
    if getattr(GradientState(), "adjusted_for_world_size", False):
        return f"; gradient accumulation is {steps} micro-steps at this size (the global batch is kept)"
    return (
        f"; the per-process batch and {steps} accumulation step(s) are kept, so the global batch is "
        f"{world}/{saved_world} of the checkpoint's (GradientAccumulationPlugin(adjust_for_world_size=True) "
        "keeps it instead)"
    )
