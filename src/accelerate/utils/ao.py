"""`accelerate.utils.ao`: upstream's path for torchao float8 training, which lives in
``precision/fp8/ao.py`` (loaded on first use; torchao itself only when a function needs it)."""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "convert_model_to_fp8_ao": "accelerate.precision.fp8.ao",
    "filter_first_and_last_linear_layers": "accelerate.precision.fp8.ao",
    "filter_linear_layers": "accelerate.precision.fp8.ao",
    "find_first_last_linear_layers": "accelerate.precision.fp8.ao",
    "has_ao_layers": "accelerate.precision.fp8.ao",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
