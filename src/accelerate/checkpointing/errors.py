"""The checkpointing layer's exception."""

from __future__ import annotations


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


class UntrustedCheckpointError(CheckpointError):
    """A checkpoint folder asks for something accelerate never does on its own: a manifest entry that
    leads outside the folder (``..``, an absolute path, a symbolic link), or a pending commit that no
    version of accelerate wrote. Nothing was read, moved or deleted when it is raised."""
