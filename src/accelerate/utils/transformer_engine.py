"""`accelerate.utils.transformer_engine`: upstream's path for Transformer Engine fp8, which lives in
``precision/fp8/te.py`` (loaded on first use; transformer_engine itself only when a function needs it)."""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "apply_fp8_autowrap": "accelerate.precision.fp8.te",
    "contextual_fp8_autocast": "accelerate.precision.fp8.te",
    "convert_model": "accelerate.precision.fp8.te",
    "has_transformer_engine_layers": "accelerate.precision.fp8.te",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
