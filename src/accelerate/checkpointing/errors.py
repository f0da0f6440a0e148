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
