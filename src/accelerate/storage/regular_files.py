"""Opening a checkpoint file to read it: only a regular file, and never a blocking open.

A FIFO, socket or device placed under a checkpoint file's name would make a plain ``open`` or read
block forever (on a helper thread no signal reaches) or never end; every read of a checkpoint opens
its file here, so such a path is refused at once with an error naming it and what it is.
"""

from __future__ import annotations

import io
import os
import stat

from accelerate.storage.errors import CheckpointError

# What a path that is not a regular file is, for the error message (the first test that holds).
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


def _not_regular(path: str | os.PathLike[str], mode: int) -> CheckpointError:
    kind = next((name for test, name in _KINDS if test(mode)), f"not a regular file (mode {mode:o})")
    return CheckpointError(
        f"Checkpoint file {path} is {kind}, not a regular file; it is refused rather than read (reading "
        "one can block forever or never end). Put the file that was saved there back, or load another "
        "checkpoint."
    )


def open_regular(path: str | os.PathLike[str]) -> io.FileIO:
    """Opens a checkpoint file to read it, refusing anything but a regular file, without blocking.

    Every read of a checkpoint goes through here. Opening with ``O_NONBLOCK`` returns at once even
    for a FIFO without a writer (a plain ``open`` would wait for one forever, on a thread that no
    signal interrupts); ``fstat`` on the open descriptor then says what was really opened, so a FIFO,
    socket, device or folder swapped in under the name is caught before a byte is read.

    Raises:
        FileNotFoundError: nothing has that name (callers word their own "missing" error).
        CheckpointError: it is not a regular file, naming the file and what it is.
    """
    flags = os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        handle = open(path, "rb", buffering=0, opener=lambda name, mode: os.open(name, mode | flags))  # noqa: SIM115 - returned to the caller
    except (FileNotFoundError, NotADirectoryError):
        raise
    except OSError as exc:  # a socket cannot be opened at all (ENXIO); a folder may not be either
        try:
            mode = os.stat(path).st_mode
        except OSError:
            raise exc from None
        if stat.S_ISREG(mode):
            raise
        raise _not_regular(path, mode) from exc
    try:
        mode = os.fstat(handle.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        os.set_blocking(handle.fileno(), True)  # no effect on a regular file; readers get a plain descriptor
    except BaseException:
        handle.close()
        raise
    return handle


def check_regular(path: str | os.PathLike[str]) -> int:
    """:func:`open_regular` for readers that open the file by name themselves; returns its size."""
    with open_regular(path) as handle:
        return os.fstat(handle.fileno()).st_size
