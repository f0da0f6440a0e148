"""8-bit and 4-bit models with bitsandbytes: ``load_and_quantize_model`` and what it is made of.

The story, one module each: ``config`` (``BnbQuantizationConfig``, checked when built), ``layers``
(which linears to swap for bitsandbytes' ``Linear8bitLt`` / ``Linear4bit``, and the swap),
``loading`` (device maps sized with quantized widths, the checkpoint streamed through
big_modeling's loader and quantized weight by weight, then dispatched), ``checks`` (refusing to
load quantized state into an unquantized model, or to move a quantized model for training).
bitsandbytes is imported only when a function needs it. Names load on first use.
"""

from __future__ import annotations

from accelerate._lazy import lazy_exports

TYPE_CHECKING = False

_LAZY: dict[str, str] = {
    "BnbQuantizationConfig": "accelerate.big_modeling.quantization.config",
    "get_keys_to_not_convert": "accelerate.big_modeling.quantization.layers",
    "has_4bit_bnb_layers": "accelerate.big_modeling.quantization.layers",
    "replace_with_bnb_layers": "accelerate.big_modeling.quantization.layers",
    "get_parameter_device": "accelerate.big_modeling.quantization.loading",
    "get_quantized_model_device_map": "accelerate.big_modeling.quantization.loading",
    "load_and_quantize_model": "accelerate.big_modeling.quantization.loading",
    "quantize_and_offload_8bit": "accelerate.big_modeling.quantization.loading",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:
    from accelerate.big_modeling.quantization.config import BnbQuantizationConfig  # noqa: F401
    from accelerate.big_modeling.quantization.layers import (  # noqa: F401
        get_keys_to_not_convert,
        has_4bit_bnb_layers,
        replace_with_bnb_layers,
    )
    from accelerate.big_modeling.quantization.loading import (  # noqa: F401
        get_parameter_device,
        get_quantized_model_device_map,
        load_and_quantize_model,
        quantize_and_offload_8bit,
    )

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
