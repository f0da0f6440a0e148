"""bitsandbytes quantization at upstream's path.

Quantizing needs a CUDA GPU and bitsandbytes, so those functions raise the one hardware error
(:func:`accelerate.utils.errors.hardware_only`). The questions that can be answered here are:
a model can only hold bitsandbytes layers when bitsandbytes is installed.
"""

from __future__ import annotations

from typing import Any

import torch

from accelerate.utils.errors import hardware_only
from accelerate.utils.imports import is_bnb_available

_bnb = hardware_only("bitsandbytes quantization", "a CUDA GPU and `pip install bitsandbytes`")


def has_4bit_bnb_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds bitsandbytes 4-bit linear layers (never, without bitsandbytes)."""
    if not is_bnb_available():
        return False
    # From its defining module: bitsandbytes.nn imports it without marking it as a re-export.
    from bitsandbytes.nn.modules import Linear4bit

    return any(isinstance(module, Linear4bit) for module in model.modules())


def get_parameter_device(parameter: torch.nn.Module) -> torch.device:
    """The device of the first parameter of ``parameter`` (a module)."""
    try:
        return next(parameter.parameters()).device
    except StopIteration:
        raise ValueError(
            f"get_parameter_device: {type(parameter).__name__} has no parameters, so it has no device."
        ) from None


@_bnb
def load_and_quantize_model(
    model: torch.nn.Module,
    bnb_quantization_config: Any,
    weights_location: Any = None,
    device_map: Any = None,
    no_split_module_classes: list[str] | None = None,
    max_memory: Any = None,
    offload_folder: Any = None,
    offload_state_dict: bool = False,
) -> Any: ...


@_bnb
def get_quantized_model_device_map(
    model: torch.nn.Module,
    bnb_quantization_config: Any,
    device_map: Any = None,
    max_memory: Any = None,
    no_split_module_classes: list[str] | None = None,
) -> Any: ...


@_bnb
def replace_with_bnb_layers(
    model: torch.nn.Module,
    bnb_quantization_config: Any,
    modules_to_not_convert: list[str] | None = None,
    current_key_name: list[str] | None = None,
) -> Any: ...


@_bnb
def get_keys_to_not_convert(model: torch.nn.Module) -> Any: ...


@_bnb
def quantize_and_offload_8bit(
    model: torch.nn.Module,
    param: Any,
    param_name: str,
    new_dtype: Any,
    offload_folder: Any,
    offload_index: Any,
    fp16_statistics: Any,
) -> Any: ...
