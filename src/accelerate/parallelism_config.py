"""`accelerate.parallelism_config`: upstream's path for :class:`ParallelismConfig` (home: state/parallelism)."""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_LAZY = {"ParallelismConfig": "accelerate.state.parallelism"}
__all__ = sorted(_LAZY)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from accelerate.state.parallelism import ParallelismConfig  # noqa: F401

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
