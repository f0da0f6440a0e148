"""`accelerate.utils.bnb`: upstream's path for bitsandbytes quantization, which lives in
``big_modeling/quantization/`` (loaded on first use; bitsandbytes itself only when a function needs it)."""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_LAZY: dict[str, str] = {
    "get_keys_to_not_convert": "accelerate.big_modeling.quantization.layers",
    "has_4bit_bnb_layers": "accelerate.big_modeling.quantization.layers",
    "replace_with_bnb_layers": "accelerate.big_modeling.quantization.layers",
    "get_parameter_device": "accelerate.big_modeling.quantization.loading",
    "get_quantized_model_device_map": "accelerate.big_modeling.quantization.loading",
    "load_and_quantize_model": "accelerate.big_modeling.quantization.loading",
    "quantize_and_offload_8bit": "accelerate.big_modeling.quantization.loading",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
