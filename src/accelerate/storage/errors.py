"""The storage layer's exceptions: what checkpointing/ and big_modeling/ raise for files on disk."""

from __future__ import annotations

import errno
import os


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read: a missing, truncated or corrupted file, or a failed save.

    It subclasses ``RuntimeError`` because that is what ``torch.nn.Module.load_state_dict(strict=True)``
    raises for key mismatches, so existing ``except RuntimeError`` handlers keep working.
    The message always names the file (or the rank) at fault.
    """


class DiskFullError(CheckpointError):
    """A checkpoint file could not be written because its disk is full (ENOSPC, EDQUOT) or the
    process may not write a file that large (EFBIG). ``path`` is the file being written."""

    def __init__(self, message: str, *, path: str, code: int) -> None:
        super().__init__(message)
        self.path = path
        self.code = code

    # The failure agreement raises this type on every rank when the ranks that failed all ran out of
    # space, so `except DiskFullError` works the same with one process and with several.
    def agreement_payload(self) -> dict[str, object]:
        return {"path": self.path, "code": self.code}

    @classmethod
    def from_agreement(cls, message: str, payload: dict[str, object]) -> DiskFullError:
        return cls(message, path=str(payload["path"]), code=int(str(payload["code"])))


class UntrustedCheckpointError(CheckpointError):
    """A checkpoint folder asks for something accelerate never does on its own: a manifest entry that
    leads outside the folder (``..``, an absolute path, a symbolic link), or a pending commit that no
    version of accelerate wrote. Nothing was read, moved or deleted when it is raised."""


_DISK_FULL = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}


def disk_full_error(
    exc: BaseException, path: str | os.PathLike[str], written: int | None = None
) -> DiskFullError | None:
    """A clear error for a write that failed because the disk is full, or None for other failures."""
    if not isinstance(exc, OSError) or exc.errno not in _DISK_FULL:
        return None
    code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    cause = (
        "the file is larger than this process may write (RLIMIT_FSIZE / ulimit -f)"
        if exc.errno == errno.EFBIG
        else "the disk is full"
        if exc.errno == errno.ENOSPC
        else "the disk quota is exhausted"
    )
    progress = f" after {written} bytes" if written is not None else ""
    return DiskFullError(
        f"Writing {path} failed{progress}: {cause} ({code}). Free space on that disk (saving over an "
        "existing checkpoint needs room for two full copies until the new one is committed) or save "
        "somewhere else.",
        path=str(path),
        code=exc.errno or 0,
    )
