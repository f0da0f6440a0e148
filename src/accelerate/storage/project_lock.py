"""A project folder belongs to one job: the writing process owns it from its first save or load until it exits.

Two jobs given the same ``project_dir`` pick the same automatic names (``checkpoint_{i}``), rotate
each other's checkpoints away and resume from each other's weights. A lock held only while one save
runs does not stop that: two jobs whose saves alternate never meet it. So the writing process of a
job (process 0, or each node's first process with ``save_on_each_node``) takes an exclusive lock on
``project_dir/.accelerate-owner.lock`` at its first ``save_state`` / ``load_state`` in that folder
and keeps it until the process ends (or calls ``end_training()``); another job's first save or load
there gets one :class:`ProjectBusyError` naming the owner (host, pid, since when, run id), read from
the lock file, where the owner writes it.

Why a POSIX record lock (``fcntl.lockf``), not ``flock``: the kernel releases both when the holder
dies, however it dies (SIGKILL, OOM, a network client's lease running out), so a restarted worker
takes the folder over with no "is that pid alive" guesswork across machines. But a ``flock`` is
shared with every process forked while it is held (DataLoader workers, forked helper pools), and
such a child left running after its parent was killed would keep the folder from the restarted job;
a record lock belongs to the process alone. Its one trap (closing *any* descriptor of the file
drops the process's lock) is why a process opens the file once per folder and never closes it.

Ranks of one job never block each other: a lock held by a process of the same run
(:mod:`~accelerate.checkpointing.run_identity`, one id for every rank) is that job's own.

Where the lock does not reach: on filesystems whose locks are node-local (NFS mounted with
``local_lock=all``/``flock``, Lustre with ``localflock``, many FUSE mounts) a job on another host
is not seen, only jobs on the same host are; where locks fail altogether (Lustre without ``flock``,
object-store mounts) one warning says so and saving goes on unprotected, as before this lock. NFS
(v3 with lockd, v4) and GPFS lock across clients. Where ``fcntl`` does not exist there is no lock.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import time
from pathlib import Path

from accelerate.storage.errors import CheckpointError

LOCK_NAME = ".accelerate-owner.lock"
logger = logging.getLogger("accelerate.checkpointing")

# The folders this process owns: lock file (real path) -> (the process that holds it, its descriptor
# or None where the filesystem has no locks). A forked child inherits the dict but not the locks.
_owned: dict[str, tuple[int, int | None]] = {}
# Project folders whose ownership this job's ranks agreed on, with the pid that agreed (a forked child
# agrees again): accelerator_io skips the exchanges for them until release_projects().
_agreed: set[tuple[int, str]] = set()


class ProjectBusyError(CheckpointError):
    """Another job owns the project folder: it saved or loaded there and is still running."""


def own_project(root: str | os.PathLike[str], *, run_id: str) -> None:
    """Makes this process the owner of the project folder ``root`` (nothing when it already is).

    Raises:
        ProjectBusyError: a process of another run holds it, named in the message.
    """
    path = Path(root) / LOCK_NAME
    key = os.path.realpath(path)
    held = _owned.get(key)
    if held is not None and held[0] == os.getpid():
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: a link planted under this name must not make us write through it.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as exc:  # a read-only project (loads only): nobody saves there through us
        logger.warning(
            "Cannot create %s (%s): this job does not own its project_dir.", path, exc.strerror or exc
        )
        _owned[key] = (os.getpid(), None)  # said once
        return
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EAGAIN):
            logger.warning(
                "Cannot lock %s (%s): this filesystem has no working file locks, so another job saving "
                "into the same project_dir would not be detected. Give each job its own project_dir.",
                path,
                exc.strerror or exc,
            )
            _owned[key] = (os.getpid(), fd)  # kept open: the record below still names the owner
            _write_record(fd, run_id)
            return
        holder = _read_record(fd)
        os.close(fd)  # never held: closing it drops nothing of ours
        if holder.get("run_id") == run_id:
            return  # another process of this job (each node's writer on one shared folder)
        raise ProjectBusyError(
            f"Another job owns {path.parent}: {_describe(holder)} (lock file {path}). It saved or "
            "loaded checkpoints there and is still running; two jobs sharing one project folder would "
            "take the same checkpoint names, rotate each other's checkpoints away and resume from each "
            "other's weights. Give this job its own ProjectConfiguration(project_dir=...), or wait until "
            "that one ends (its process exiting, however it ends, frees the folder)."
        ) from None
    except BaseException:
        os.close(fd)
        raise
    _owned[key] = (os.getpid(), fd)
    _write_record(fd, run_id)


def agreed_on(root: str | os.PathLike[str]) -> bool:
    """Whether this job's ranks already agreed, in this process, that it owns ``root``."""
    return (os.getpid(), os.path.realpath(root)) in _agreed


def note_agreed(root: str | os.PathLike[str]) -> None:
    _agreed.add((os.getpid(), os.path.realpath(root)))


def release_projects() -> None:
    """Gives up every folder this process owns (``end_training()``, and tests: each is a job)."""
    _agreed.clear()
    for key, (pid, fd) in list(_owned.items()):
        del _owned[key]
        if pid != os.getpid() or fd is None:
            continue  # a fork's copy of its parent's entry: the parent's descriptor and lock
        import fcntl

        try:
            fcntl.lockf(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        finally:
            os.close(fd)


def _write_record(fd: int, run_id: str) -> None:
    record = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time(), "run_id": run_id}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode("utf-8"), 0)
        os.fsync(fd)  # a network filesystem shows it to another host's reader only once flushed
    except OSError:  # only for the message: not worth failing a save over
        pass


def _read_record(fd: int) -> dict[str, object]:
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _describe(record: dict[str, object]) -> str:
    try:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(record["since"])))  # type: ignore[arg-type]
        return f"host {record['host']}, pid {record['pid']}, owner since {since}, run {record.get('run_id')}"
    except (KeyError, TypeError, ValueError):
        return "a job that has not written its name yet"
