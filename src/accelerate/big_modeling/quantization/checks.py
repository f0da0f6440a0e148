"""Guards for quantized models elsewhere in accelerate: loading saved state, and training placement.

Both answer from names and attributes, never importing bitsandbytes: a model holding its layers
has imported it already, and a state dict tells its layers apart by the keys they add (``SCB``
beside an 8-bit weight, ``weight.quant_state.bitsandbytes__*`` beside a 4-bit one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from accelerate.big_modeling.quantization.layers import _is_bnb_layer

_4BIT_MARK = ".weight.quant_state.bitsandbytes__"


def _saved_layers(state_dict: Mapping[str, Any]) -> dict[str, str]:
    """Module name -> "8-bit" / "4-bit" for the layers a state dict shows were saved quantized."""
    saved: dict[str, str] = {}
    for key in state_dict:
        if key.endswith(".SCB"):
            saved[key[: -len(".SCB")]] = "8-bit"
        elif _4BIT_MARK in key:
            saved[key.split(_4BIT_MARK)[0]] = "4-bit"
    return saved


def _layer_kind(module: nn.Module) -> str | None:
    if _is_bnb_layer(module, "Linear8bitLt"):
        return "8-bit"
    if _is_bnb_layer(module, "Linear4bit"):
        return "4-bit"
    return None


def quantization_mismatches(model: nn.Module, state_dict: Mapping[str, Any]) -> list[str]:
    """Layers saved quantized that the model holds unquantized (or in the other width), and the reverse.

    Loading across that difference would copy int8 / packed 4-bit values into float weights (or
    floats into quantized storage): silent garbage, so callers refuse it with these descriptions.
    """
    saved = _saved_layers(state_dict)
    problems: list[str] = []
    for name, module in model.named_modules():
        here = _layer_kind(module)
        there = saved.get(name)
        if there is None and (here is None or f"{name}.weight" not in state_dict):
            continue
        if here != there:
            label = name or type(model).__name__
            problems.append(
                f"{label} was saved as {'a bitsandbytes ' + there + ' layer' if there else 'an unquantized layer'} "
                f"but is {'a bitsandbytes ' + here + ' layer' if here else 'an unquantized ' + type(module).__name__} "
                "in this model; load the state into a model quantized the same way (load_and_quantize_model with "
                "the same BnbQuantizationConfig)"
            )
    return problems


def is_quantized_model(model: nn.Module) -> bool:
    """Whether ``model`` was loaded in 8-bit or 4-bit (by ``load_and_quantize_model`` or transformers)."""
    return bool(getattr(model, "is_loaded_in_8bit", False) or getattr(model, "is_loaded_in_4bit", False))


def _same_device(here: torch.device, there: torch.device) -> bool:
    return here.type == there.type and (
        here.index is None or there.index is None or here.index == there.index
    )


def _offload_refused(mapped: set[str]) -> bool:
    """Upstream's rule: blocks on the disk never train; blocks on the CPU only with a bitsandbytes that
    runs there (its multi-backend build) and no XPU (whose bitsandbytes backend does not take them)."""
    from accelerate.utils import imports

    if "disk" in mapped:
        return True
    return "cpu" in mapped and (
        not imports.is_bitsandbytes_multi_backend_available() or imports.is_xpu_available()
    )


def check_quantized_placement(model: nn.Module, device: torch.device, place: bool) -> bool:
    """For ``Accelerator.prepare_model``: whether to move ``model`` to ``device``.

    A quantized model is never moved (bitsandbytes' parameters would quantize again or lose their
    scales); instead it must already be where training runs, and not be offloaded to the disk (nor
    to the CPU, where bitsandbytes cannot run there), as upstream.

    Raises:
        ValueError: a quantized model with offloaded blocks (upstream's message), or loaded on
            another device than ``device``.
    """
    if not is_quantized_model(model):
        return place
    width = "8-bit" if getattr(model, "is_loaded_in_8bit", False) else "4-bit"
    mapped = {str(d) for d in (getattr(model, "hf_device_map", None) or {}).values()}
    if _offload_refused(mapped):
        raise ValueError(
            "You can't train a model that has been loaded in 8-bit or 4-bit precision with CPU or disk offload. "
            "If you want train the 8-bit or 4-bit model in CPU, please install bitsandbytes with multi-backend, "
            "see https://huggingface.co/docs/bitsandbytes/main/en/installation#multi-backend"
        )
    elsewhere = sorted(
        {
            str(t.device)
            for t in model.parameters()
            if t.device.type != "meta" and not _same_device(t.device, device)
        }
    )
    if elsewhere:
        raise ValueError(
            f"prepare(): this model was loaded in {width} on {elsewhere} but training runs on {device}; a quantized "
            f"model cannot be moved. Load it on the training device, e.g. device_map={{'': '{device}'}}."
        )
    return False
