"""Strategies: one module (or package: ``fsdp/``, ``deepspeed/``, ``xla/``) per backend; `resolve.py` is the one place that picks them.

Lazy, so that the torch-free parts of a backend package (the FSDP plugin and its launch translation)
can be imported by the CLI without importing torch.
"""

from accelerate._lazy import lazy_exports

_EXPORTS = {
    "Strategy": "accelerate.backends.base",
    "resolve_strategy": "accelerate.backends.resolve",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
