"""Public module path ``accelerate.utils.tqdm``: a lazy face of :mod:`accelerate.progress`.

The bar asks the process state which process draws it, so it lives above ``utils/``.
"""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_LAZY: dict[str, str] = {"tqdm": "accelerate.progress"}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
