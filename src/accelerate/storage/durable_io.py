"""Durable single files: written through a checksumming sink and fsynced (read back: verified_read.py).

Files are hashed while they stream out (XXH3, or CRC-32 without the xxhash package) on a helper
thread, so checksums cost almost no wall time; fsyncs can be deferred to overlap with the next file,
and several files can be written at once (:func:`write_all`), one writer thread each.
"""

from __future__ import annotations

import io
import os
import threading
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for_futures
from dataclasses import dataclass
from typing import IO, Any, TypeVar, cast

from accelerate.state.teardown import on_shutdown
from accelerate.storage.errors import CheckpointError, disk_full_error

_xxhash: Any
try:  # xxHash's XXH3 runs at ~10 GB/s (10x zlib's CRC-32 here), so verifying costs almost nothing.
    import xxhash as _xxhash
except ImportError:  # pragma: no cover - xxhash is a dependency; CRC-32 keeps working without it
    _xxhash = None
CHECKSUM_ALGORITHM = "xxh3_64" if _xxhash is not None else "crc32"
SUPPORTED_ALGORITHMS = ("xxh3_64", "crc32")
MANIFEST_NAME = "accelerate_manifest.json"
CHUNK = 8 * 1024 * 1024  # the unit files are hashed in, here and in verified_read.py
# Below this, handing a buffer to another thread costs more than hashing it in place.
_PARALLEL_MIN = 1024 * 1024
# torch.save (and DCP, once per tensor) writes zip headers and small records one write() each: a
# system call apiece unbuffered. Writes below this are gathered and handed to the OS together.
_GATHER = 256 * 1024

# This module alone owns its threads: every use goes through _helper() / _syncer(), nothing outside
# reaches them (callers pass a SyncGroup when they want fsyncs deferred).
_EXECUTOR: ThreadPoolExecutor | None = None
_SYNCER: ThreadPoolExecutor | None = None
_EXECUTOR_LOCK = threading.Lock()
# Deferred fsyncs mostly wait on the disk, not the CPU: several in flight at once are committed
# together by the filesystem's journal instead of one after another.
_SYNC_THREADS = 4
# Files written at once by write_all(): serialising one file (torch.save's pickling, holding the GIL)
# overlaps with another's bytes going to the OS and being hashed (both release the GIL).
_WRITER_THREADS = 4
_WRITERS: ThreadPoolExecutor | None = None
T = TypeVar("T")


def _helper() -> ThreadPoolExecutor:
    """Long-lived threads for checksums that overlap with I/O (created on first use): one per
    writer that may hash at the same time, so a writer never waits for another file's checksum."""
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(
                max_workers=_WRITER_THREADS, thread_name_prefix="accelerate-checksum"
            )
            on_shutdown(shutdown_helper)
        return _EXECUTOR


def _syncer() -> ThreadPoolExecutor:
    """Threads for deferred fsyncs, apart from the checksum threads: a writer that waits for the
    checksum of its next buffer never queues behind another file's fsync."""
    global _SYNCER
    _helper()  # registers the shutdown of both
    with _EXECUTOR_LOCK:
        if _SYNCER is None:
            _SYNCER = ThreadPoolExecutor(max_workers=_SYNC_THREADS, thread_name_prefix="accelerate-fsync")
        return _SYNCER


def _writers() -> ThreadPoolExecutor:
    """Threads that write whole files for :func:`write_all` (apart from the checksum threads, which
    a writer waits on, so the two never queue behind each other)."""
    global _WRITERS
    _helper()  # registers the shutdown of every pool here
    with _EXECUTOR_LOCK:
        if _WRITERS is None:
            _WRITERS = ThreadPoolExecutor(max_workers=_WRITER_THREADS, thread_name_prefix="accelerate-writer")
        return _WRITERS


def _forget_parent_threads() -> None:
    """In a forked child: the parent's pools came along without their threads (fork copies only the
    forking thread), so work handed to them would wait forever; the next use here starts new ones.
    The lock is made anew too, in case another parent thread held it at the fork."""
    global _EXECUTOR, _SYNCER, _WRITERS, _EXECUTOR_LOCK
    _EXECUTOR = _SYNCER = _WRITERS = None
    _EXECUTOR_LOCK = threading.Lock()


# notebook_launcher / debug_launcher fork their processes from a parent that may have saved already.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_threads)


def submit_to_helper(fn: Callable[..., T], /, *args: Any) -> Future[T]:
    """Runs ``fn(*args)`` on the helper thread (hashing, checks that overlap with a read or a write)."""
    return _helper().submit(fn, *args)


def ensure_helper() -> None:
    """Starts the helper threads now (so their shutdown is registered before a later user's)."""
    _helper()


def shutdown_helper() -> None:
    """Finishes the queued work and joins the helper threads; the next use starts new ones.

    Called before the process group is destroyed (``end_training()``, exit), so no library thread
    outlives it.
    """
    global _EXECUTOR, _SYNCER, _WRITERS
    with _EXECUTOR_LOCK:
        # Writers first: a file still being written hands its checksums and fsync to the others.
        executors, _EXECUTOR, _SYNCER, _WRITERS = (_WRITERS, _EXECUTOR, _SYNCER), None, None, None
    for executor in executors:
        if executor is not None:
            executor.shutdown(wait=True)


class Hasher:
    """Incremental checksum of one file (``xxh3_64`` or ``crc32``); both release the GIL."""

    def __init__(self, algorithm: str = CHECKSUM_ALGORITHM) -> None:
        self.algorithm = algorithm
        self._crc = 0
        self._xxh: Any = None
        if algorithm == "xxh3_64":
            if _xxhash is None:
                raise CheckpointError(
                    "This checkpoint's checksums are XXH3, which needs the xxhash package: pip install xxhash"
                )
            self._xxh = _xxhash.xxh3_64()
        elif algorithm != "crc32":
            raise CheckpointError(
                f"Unknown checksum algorithm {algorithm!r} (known: {', '.join(SUPPORTED_ALGORITHMS)}); "
                "the checkpoint was written by a newer accelerate"
            )

    def update(self, view: memoryview) -> None:
        if self._xxh is not None:
            self._xxh.update(view)
        else:
            self._crc = zlib.crc32(view, self._crc)

    def hexdigest(self) -> str:
        return str(self._xxh.hexdigest()) if self._xxh is not None else f"{self._crc:08x}"


# --- single files -------------------------------------------------------------------------------
@dataclass(frozen=True)
class FileRecord:
    """Size in bytes and checksum (hex digits, of ``algorithm``) of one written file."""

    size: int
    checksum: str
    algorithm: str = "crc32"

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "checksum": self.checksum, "algorithm": self.algorithm}

    @classmethod
    def from_json(cls, data: Any) -> FileRecord:
        return cls(
            size=int(data["size"]),
            checksum=str(data["checksum"]),
            algorithm=str(data.get("algorithm", "crc32")),
        )


class ChecksumSink(io.RawIOBase):
    """A write-only file object over a file descriptor that checksums every byte it writes.

    ``torch.save`` and the safetensors writer stream into it directly, so hashing needs no second
    pass over the data and no extra copy. Small writes are gathered: :meth:`drain` hands them to
    the OS, and whoever fsyncs or closes the descriptor calls it first (``flush()`` does not, as
    ``torch.save`` and DCP call it after every object).
    """

    def __init__(self, fd: int, *, checksum: bool = True) -> None:
        super().__init__()
        self._fd = fd
        # Without a manifest to record it in (plain model files), a checksum would be wasted work.
        self._hasher: Hasher | None = Hasher() if checksum else None
        # Bytes the OS has accepted (gathered ones count once drained): after the last drain the
        # file's size, and after a failed write how far the file got (the disk-full error says so).
        self.size = 0
        self._gathered = bytearray()
        # torch.save's C++ writer turns a failed write into "unexpected pos ..."; keep the real cause.
        self.os_error: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        if total < _GATHER:
            self._gathered += view
            if len(self._gathered) >= _GATHER:
                self.drain()
            return total
        self.drain()  # the bytes keep their order
        self._emit(view)
        return total

    @property
    def pending_bytes(self) -> int:
        """Bytes written to this sink but still gathered here (not yet given to the OS)."""
        return len(self._gathered)

    def drain(self) -> None:
        """Hands the gathered small writes to the OS (call it before an fsync or closing the fd)."""
        if self._gathered:
            gathered, self._gathered = self._gathered, bytearray()
            self._emit(memoryview(gathered))

    def close(self) -> None:
        # The descriptor is its owner's: bytes still gathered (after a failure) are never written,
        # not even when the garbage collector closes this object after the descriptor was reused.
        self._gathered = bytearray()
        super().close()

    def _emit(self, view: memoryview) -> None:
        total = len(view)
        if self._hasher is None:
            self._write_all(view)
        elif total >= _PARALLEL_MIN:
            # Hash on the helper thread while this one writes the same bytes; both wait before
            # returning, since the caller may reuse the buffer afterwards.
            pending = _helper().submit(self._hasher.update, view)
            self._write_all(view)
            pending.result()
        else:
            self._hasher.update(view)
            self._write_all(view)

    def _write_all(self, view: memoryview) -> None:
        while view:
            try:
                written = os.write(self._fd, view)
            except OSError as exc:
                self.os_error = exc
                raise
            # Counted as written, so a full disk's error says how far the file got.
            self.size += written
            view = view[written:]

    def record(self) -> FileRecord:
        if self._gathered:  # a bug in the caller: the record would describe bytes not on disk
            raise RuntimeError("ChecksumSink.record() before drain(): gathered bytes were never written")
        if self._hasher is None:
            return FileRecord(self.size, "", "none")
        return FileRecord(self.size, self._hasher.hexdigest(), self._hasher.algorithm)


def _fsync_close(fd: int, path: str | os.PathLike[str] = "<file>") -> None:
    try:
        os.fsync(fd)
    except OSError as exc:
        full = disk_full_error(exc, path)
        if full is None:
            raise
        raise full from exc
    finally:
        os.close(fd)


class SyncGroup:
    """Defers fsyncs to a helper thread, so one file is flushed to disk while the next is written.

    Call :meth:`wait` before anything that must follow durability (the manifest); it re-raises the
    first fsync error.
    """

    def __init__(self) -> None:
        self._pending: list[Future[None]] = []
        self._lock = threading.Lock()  # files written at once (write_all) submit from several threads

    def submit(self, fd: int, path: str | os.PathLike[str] = "<file>") -> None:
        future = _syncer().submit(_fsync_close, fd, path)
        with self._lock:
            self._pending.append(future)

    def wait(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        errors = [f.exception() for f in pending]
        for error in errors:
            if error is not None:
                raise error


def write_file(
    path: str | os.PathLike[str],
    produce: Callable[[ChecksumSink], Any],
    *,
    sync: SyncGroup | None = None,
    checksum: bool = True,
) -> FileRecord:
    """Creates ``path``, lets ``produce`` stream into it, fsyncs it, and returns its record.

    With ``sync``, the fsync runs in the background and ``sync.wait()`` completes it. With
    ``checksum=False`` the record holds only the size.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sink = ChecksumSink(fd, checksum=checksum)
    try:
        produce(sink)
        sink.drain()
    except BaseException as exc:
        os.close(fd)
        full = disk_full_error(sink.os_error or exc, path, sink.size)
        if full is not None:
            raise full from exc
        if sink.os_error is not None and sink.os_error is not exc:
            raise sink.os_error from exc  # the real cause, not the serializer's rewording of it
        raise
    if sync is not None:
        sync.submit(fd, path)
    else:
        _fsync_close(fd, path)
    return sink.record()


def write_all(jobs: Sequence[Callable[[], T]]) -> list[T]:
    """Runs every job (each writes one file), several at once; their results in ``jobs``' order.

    Every job has ended when this returns or raises, so a caller that cleans up after a failure
    never races a writer. A failure raises the exception of the first failed job in ``jobs``' order
    (the one a one-by-one writer would have hit first), after the others have finished.
    """
    if len(jobs) <= 1:
        return [job() for job in jobs]
    futures = [_writers().submit(job) for job in jobs]
    wait_for_futures(futures)
    for future in futures:
        error = future.exception()
        if error is not None:
            raise error
    return [future.result() for future in futures]


def write_bytes(path: str | os.PathLike[str], data: bytes, *, sync: SyncGroup | None = None) -> FileRecord:
    return write_file(path, lambda sink: sink.write(data), sync=sync)


def save_torch(
    obj: Any, path: str | os.PathLike[str], *, sync: SyncGroup | None = None, checksum: bool = True
) -> FileRecord:
    """``torch.save(obj)`` to ``path``, fsynced and checksummed while written.

    Tensors are written where they are: a caller holding device tensors that a file cannot carry
    (a lazy device's) copies them first (``CheckpointIO.host_copy``).
    """
    import torch

    return write_file(path, lambda sink: torch.save(obj, cast(IO[bytes], sink)), sync=sync, checksum=checksum)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Makes a folder's entries (created, renamed, removed files) durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
