"""Mixed precision: autocast, fp16 loss scaling and skipped-step detection; fp8 in ``precision/fp8``.

Names load on first use, so the torch-free fp8 recipe settings (``precision/fp8/recipes.py``) can be
imported by the CLI and the config classes without importing torch.
"""

from accelerate._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "Precision": "accelerate.precision.amp",
    "convert_outputs_to_fp32": "accelerate.utils.fp32_outputs",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
