"""`GatheredParameters`'s address under utils: it lives with DeepSpeed, in :mod:`accelerate.backends.deepspeed.gathered`.

Loaded on first use; without ZeRO-3 partitioned parameters the context does nothing.
"""

from accelerate._lazy import lazy_exports

_EXPORTS = {"GatheredParameters": "accelerate.backends.deepspeed.gathered"}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
