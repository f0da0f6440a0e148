"""One saving job per project folder at a time: an advisory lock held for the duration of a save.

Two jobs given the same ``project_dir`` pick the same automatic names (``checkpoint_{i}``) and stage
into the same hidden folders; without a lock the second job's every save fails with a cascade of
``FileExistsError`` (or worse, races the first one's rotation). The writing process of each job
takes an exclusive ``flock`` on ``project_dir/checkpoints/.accelerate-save.lock`` before a save and
releases it after the commit and rotation; a job that finds it taken gets one error naming the
other job (host, pid, since when).

Why ``flock``: the kernel releases it when its holder dies, however it dies (SIGKILL, OOM, power
loss of a network client), so a stale lock of a dead process never blocks the next job, and no
"is that pid still alive" guesswork is needed across machines. The file's content (who holds it)
is only for the message. The holder removes the file when it releases the lock (so a project folder
holds no lock file between saves), and a taker checks that the file it locked is still the one at the
path: one removed in between is retried, so two jobs can never hold locks on two different files.
Where ``fcntl`` does not exist the lock is a no-op.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from accelerate.checkpointing.errors import CheckpointError

LOCK_NAME = ".accelerate-save.lock"


class ProjectBusyError(CheckpointError):
    """Another job is saving into the same project folder right now."""


class ProjectLock:
    """``with ProjectLock(root): ...`` holds the project's save lock for the block.

    :meth:`acquire` and :meth:`release` are there for a save that ends on another thread
    (``async_save``); releasing twice is harmless.

    Raises:
        ProjectBusyError: from :meth:`acquire`, naming the job that holds the lock.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.path = Path(root) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> ProjectLock:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no lock, as before
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(100):  # each retry means another job released (and removed) it meanwhile
            fd = self._try_lock(fcntl)
            if fd is not None:
                break
        else:  # pragma: no cover - a hundred saves ending in a row while we try
            raise ProjectBusyError(f"Could not take the save lock {self.path}: other jobs keep saving there")
        info = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode("utf-8"), 0)
        self._fd = fd
        return self

    def _try_lock(self, fcntl: Any) -> int | None:
        """The locked file's descriptor, or None when the file was replaced before we locked it."""
        # O_NOFOLLOW: a link planted under this name must not make us write through it.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise ProjectBusyError(
                f"Another job is saving into {self.path.parent.parent} right now ({holder}; lock file "
                f"{self.path}). Two jobs sharing one project_dir would race for the same checkpoint names "
                "and rotation: give each job its own ProjectConfiguration(project_dir=...), or stop the "
                "other job. The lock is released the moment that job's save ends or its process dies."
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            current = os.stat(self.path, follow_symlinks=False).st_ino
        except FileNotFoundError:
            current = None
        if current != os.fstat(fd).st_ino:  # released and removed by its holder before our flock
            os.close(fd)
            return None
        return fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        import fcntl

        try:
            # Removed while still held, so a taker that opened it meanwhile sees it is stale and retries.
            self.path.unlink(missing_ok=True)
            # Explicitly, not only by closing: a process forked meanwhile (a DataLoader worker) shares
            # the open file and would otherwise keep the lock alive.
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> ProjectLock:
        return self.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["since"])))
        return f"host {info['host']}, pid {info['pid']}, saving since {since}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a job that has not written its name yet"
