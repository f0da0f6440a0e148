"""Whether accelerate itself is reading a model's state dict (not the user's own ``state_dict()``).

A pipeline rank frees the tensors of the stages it does not run, so a user's ``state_dict()`` of the
whole model would return empty tensors for them; the pipeline backend makes that call an error
unless it happens inside :func:`internal_state_read`, where accelerate reads only what it knows to
be there (the keys, or this rank's own stages, or the hooks' view in ``save_state``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["internal_state_read", "is_internal_state_read"]


class _Reads:
    depth = 0


@contextlib.contextmanager
def internal_state_read() -> Iterator[None]:
    _Reads.depth += 1
    try:
        yield
    finally:
        _Reads.depth -= 1


def is_internal_state_read() -> bool:
    return _Reads.depth > 0
