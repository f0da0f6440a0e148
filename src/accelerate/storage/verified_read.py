"""Verified reads of durable files: size and checksum checked against the record written with them.

Large files are memory-mapped (copy-on-write for loads, read-only for checks), so a checksum costs
one pass over the page cache and no copy; :func:`load_verified` checks a file on a helper thread
while its loader reads the same pages.
"""

from __future__ import annotations

import io
import mmap
import os
import sys
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, cast

from accelerate.storage.durable_io import (
    CHECKSUM_ALGORITHM,
    CHUNK,
    MANIFEST_NAME,
    FileRecord,
    Hasher,
    submit_to_helper,
)
from accelerate.storage.errors import CheckpointError
from accelerate.storage.regular_files import open_regular


def _open_checked(path: Path, record: FileRecord | None) -> tuple[io.FileIO, int]:
    """The file opened by :func:`open_regular` and its size, checked against ``record`` if given."""
    try:
        handle = open_regular(path)
    except FileNotFoundError:
        listed = f" (listed in {MANIFEST_NAME})" if record is not None else ""
        raise CheckpointError(f"Checkpoint file {path} is missing{listed}") from None
    size = os.fstat(handle.fileno()).st_size
    if record is not None and size != record.size:
        handle.close()
        raise CheckpointError(
            f"Checkpoint file {path} is damaged: {size} bytes on disk, {record.size} when saved "
            "(truncated or overwritten). Load an earlier checkpoint."
        )
    return handle, size


def _check_crc(path: Path, digest: str, record: FileRecord) -> None:
    if digest != record.checksum:
        raise CheckpointError(
            f"Checkpoint file {path} is corrupted: its {record.algorithm} checksum is {digest}, "
            f"{record.checksum} when saved. Load an earlier checkpoint."
        )


# Files at least this large are read through a memory map rather than read() into new memory.
_MAP_MIN = 1024 * 1024


# Linux 5.14+: map every page of the file in one call instead of one fault per few pages.
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22 if sys.platform.startswith("linux") else None)


def _map(handle: io.FileIO, size: int, access: int) -> mmap.mmap:
    mapped = mmap.mmap(handle.fileno(), size, access=access)
    if _MADV_POPULATE_READ is not None and hasattr(mapped, "madvise"):
        try:
            mapped.madvise(_MADV_POPULATE_READ)
        except OSError:  # an older kernel: the pages fault in as they are read
            pass
    return mapped


def _hash_view(hasher: Hasher, mapped: mmap.mmap) -> str:
    view = memoryview(mapped)
    try:
        for start in range(0, len(view), CHUNK):
            hasher.update(view[start : start + CHUNK])  # releases the GIL: other threads go on
    finally:
        view.release()
    return hasher.hexdigest()


def _hash_mapped(path: Path, mapped: mmap.mmap, record: FileRecord) -> None:
    _check_crc(path, _hash_view(Hasher(record.algorithm), mapped), record)


def read_verified(path: str | os.PathLike[str], record: FileRecord | None = None) -> memoryview:
    """The whole file as one buffer, its size and checksum checked against ``record`` if given.

    A large file is memory-mapped copy-on-write, like the safetensors package's ``load_file``: its
    pages come straight from the page cache (no copy into freshly faulted memory, which cost more
    than the disk read), the checksum is computed from the mapped pages, and tensors viewing the
    buffer stay writable without touching the file.
    """
    path = Path(path)
    handle, size = _open_checked(path, record)
    with handle:
        if size >= _MAP_MIN:
            mapped = _map(handle, size, mmap.ACCESS_COPY)
            if record is not None:
                _hash_mapped(path, mapped, record)
            return memoryview(mapped)
        # torch.empty, not bytearray(size): skipping the zero-fill saves a full pass over the memory.
        import torch

        view = memoryview(cast(Any, torch.empty(size, dtype=torch.uint8).numpy()))
        got = 0
        while got < size:
            n = handle.readinto(view[got:])
            if not n:
                raise CheckpointError(
                    f"Checkpoint file {path} shrank while being read ({got} of {size} bytes)"
                )
            got += n
    if record is not None:
        hasher = Hasher(record.algorithm)
        hasher.update(view)
        _check_crc(path, hasher.hexdigest(), record)
    return view


def _file_digest(handle: io.FileIO, size: int, algorithm: str) -> str:
    """The checksum of an open file's bytes; large files are hashed from a read-only map (no copy)."""
    hasher = Hasher(algorithm)
    if size >= _MAP_MIN:
        mapped = _map(handle, size, mmap.ACCESS_READ)
        try:
            return _hash_view(hasher, mapped)
        finally:
            mapped.close()
    chunk = bytearray(CHUNK)
    view = memoryview(chunk)
    while n := handle.readinto(chunk):
        hasher.update(view[:n])
    return hasher.hexdigest()


def verify_file(path: str | os.PathLike[str], record: FileRecord) -> None:
    """Checks a file against its record (for files another reader will open by path).

    Large files are hashed from a read-only map of the page cache: no copy of the bytes at all.
    """
    path = Path(path)
    handle, size = _open_checked(path, record)
    with handle:
        digest = _file_digest(handle, size, record.algorithm)
    _check_crc(path, digest, record)


def file_record(path: str | os.PathLike[str]) -> FileRecord:
    """The record of a file as written, hashed from the page cache (for writers that are not a sink)."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        return FileRecord(size, _file_digest(handle, size, CHECKSUM_ALGORITHM), CHECKSUM_ALGORITHM)


def file_record_soon(path: str | os.PathLike[str]) -> Future[FileRecord]:
    """:func:`file_record` on a helper thread: started before an fsync, it hashes while the disk works."""
    return submit_to_helper(file_record, path)


def load_verified(
    path: str | os.PathLike[str], record: FileRecord | None, load: Callable[[Path], Any]
) -> Any:
    """``load(path)`` while the file is verified on a helper thread; a damaged file raises first.

    Both read the same pages (the second from the page cache), so verification adds little wall time.
    The file is checked to be a regular file first; ``load`` opens it by name again, and should do so
    through :func:`open_regular` (or pass it to a reader after :func:`check_regular`) as well.
    """
    path = Path(path)
    # Opened here first, on the caller's thread: a FIFO (or a truncated file) is refused before the
    # loader, which opens the file by name, could block on it.
    handle, size = _open_checked(path, record)
    if record is None:
        handle.close()
        return load(path)
    check = submit_to_helper(_verify_open, path, handle, size, record)
    try:
        value = load(path)
    except BaseException:
        check.result()  # prefer "file X is truncated" over the loader's own confusion
        raise
    check.result()
    return value


def _verify_open(path: Path, handle: io.FileIO, size: int, record: FileRecord) -> None:
    with handle:
        digest = _file_digest(handle, size, record.algorithm)
    _check_crc(path, digest, record)
