"""`accelerate.utils.bnb`: upstream's path for bitsandbytes quantization, which lives in
``big_modeling/quantization/``.

Every name is looked up on that package, whose own lazy table is the one place that says which of
its modules defines it (loaded on first use; bitsandbytes itself only when a function needs it).
"""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_HOME = "accelerate.big_modeling.quantization"

_LAZY: dict[str, str] = dict.fromkeys(
    (
        "get_keys_to_not_convert",
        "get_parameter_device",
        "get_quantized_model_device_map",
        "has_4bit_bnb_layers",
        "load_and_quantize_model",
        "quantize_and_offload_8bit",
        "replace_with_bnb_layers",
    ),
    _HOME,
)

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
