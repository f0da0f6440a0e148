"""``load_and_quantize_model``: a checkpoint loaded straight into bitsandbytes layers, then dispatched.

The steps, each reusing big_modeling: pick the layers to leave alone (the head, tied weights,
``skip_modules``, ``keep_in_fp32_modules``, and the offloaded blocks bitsandbytes cannot run
quantized: see :func:`offloaded_kept_unquantized`); swap the other linears for bitsandbytes layers
while the model is still empty; size a device map with the quantized sizes
(``infer_auto_device_map``); stream the checkpoint in with ``load_checkpoint_in_model`` (each
weight is quantized as it lands: bitsandbytes' parameters quantize in ``.to()``, so peak memory
stays one fp weight above the quantized model; 8-bit weights bound for the disk are quantized and
written with their scales); and place the result with ``dispatch_model``, whose offload hooks read
8-bit weights and scales back for each forward.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from accelerate.big_modeling.device_map import device_of
from accelerate.big_modeling.quantization.config import BnbQuantizationConfig
from accelerate.big_modeling.quantization.layers import (
    _is_bnb_layer,
    cast_unquantized,
    get_keys_to_not_convert,
    import_bitsandbytes,
    module_matches,
    parameter_device,
    quantized_module_names,
    replace_with_bnb_layers,
)
from accelerate.big_modeling.tensors import DeviceLike, set_module_tensor_to_device

_MODES = ("auto", "balanced", "balanced_low_0", "sequential")


def get_parameter_device(parameter: nn.Module) -> torch.device:
    """The device of the first parameter of ``parameter`` (a module)."""
    return parameter_device(parameter)


def _default_device() -> DeviceLike:
    return torch.cuda.current_device() if torch.cuda.is_available() else "cpu"


def _is_accelerator(device: DeviceLike) -> bool:
    return str(device) not in ("cpu", "disk", "meta")


def offloaded_kept_unquantized(
    config: BnbQuantizationConfig, device_map: Mapping[str, DeviceLike]
) -> set[str]:
    """The offload targets ("cpu", "disk") whose blocks stay in ``torch_dtype`` instead of being quantized.

    8-bit weights go to the disk quantized: int8 values and per-row scales are written to the
    offload folder and handed back to the layer per forward. 4-bit weights carry a quantization
    state that is not written to an offload folder, so 4-bit blocks on the disk stay unquantized.
    Blocks on the CPU while accelerators run the rest are copied to the accelerator per forward;
    that path is kept unquantized for both widths (it is not exercised without a GPU).
    """
    kept = set() if config.load_in_8bit else {"disk"}
    if any(_is_accelerator(d) for d in device_map.values()):
        kept.add("cpu")
    return kept


def _left_unquantized_by_map(
    config: BnbQuantizationConfig, device_map: Mapping[str, DeviceLike]
) -> list[str]:
    kept = offloaded_kept_unquantized(config, device_map)
    return [name for name, device in device_map.items() if str(device) in kept]


def get_quantized_model_device_map(
    model: nn.Module,
    bnb_quantization_config: BnbQuantizationConfig,
    device_map: str | Mapping[str, DeviceLike] | None = None,
    max_memory: Mapping[Any, int | str] | None = None,
    no_split_module_classes: list[str] | None = None,
) -> dict[str, DeviceLike]:
    """The device map of a model whose linears were replaced by bitsandbytes layers.

    Args:
        model: the model after :func:`replace_with_bnb_layers` (its weights may be on the meta device).
        bnb_quantization_config: sizes quantized weights at 1 byte (8-bit) or half a byte (4-bit)
            per value, the rest in ``torch_dtype`` (float32 under ``keep_in_fp32_modules``).
        device_map: a dict (checked and returned), one of "auto" / "balanced" / "balanced_low_0" /
            "sequential" (inferred from ``max_memory``), or None (everything on the current GPU, or
            on the CPU without one).
        max_memory, no_split_module_classes: as for ``infer_auto_device_map``.

    Raises:
        ValueError: an unknown mode, or a quantized layer sent where it cannot run quantized: a
            4-bit layer to the disk, or any quantized layer to the CPU while accelerators run the
            rest (8-bit layers may go to the disk).
    """
    from accelerate.big_modeling.budgets import get_balanced_memory
    from accelerate.big_modeling.planner import infer_auto_device_map

    config = bnb_quantization_config
    if device_map is None:
        device_map = {"": _default_device()}
    if isinstance(device_map, str):
        if device_map not in _MODES:
            raise ValueError(f"device_map={device_map!r} is not supported: use a dict or one of {_MODES}.")
        quantized = quantized_module_names(model)
        special: dict[str, Any] = {}
        for name, tensor in model.named_parameters():
            owner = name.rpartition(".")[0]
            if owner in quantized and name.endswith(".weight"):
                special[name] = config.target_dtype
            elif module_matches(owner, config.keep_in_fp32_modules or ()) and tensor.is_floating_point():
                special[name] = torch.float32
        if device_map != "sequential":
            max_memory = get_balanced_memory(
                model,
                max_memory=max_memory,
                no_split_module_classes=no_split_module_classes,
                dtype=config.torch_dtype,
                special_dtypes=special,
                low_zero=device_map == "balanced_low_0",
            )
        device_map = infer_auto_device_map(
            model,
            max_memory=max_memory,
            no_split_module_classes=no_split_module_classes,
            dtype=config.torch_dtype,
            special_dtypes=special,
        )
    device_map = dict(device_map)
    kept = offloaded_kept_unquantized(config, device_map)
    misplaced = [
        name for name in quantized_module_names(model) if str(device_of(f"{name}.weight", device_map)) in kept
    ]
    if misplaced:
        width = "8-bit" if config.load_in_8bit else "4-bit"
        places = sorted({str(device_of(f"{n}.weight", device_map)) for n in misplaced})
        why = (
            "4-bit weights cannot be written to an offload folder and read back (their quantization state is not "
            "serialized there)"
            if places == ["disk"]
            else "quantized layers are not copied from the CPU to the accelerator per forward"
        )
        eight = (
            "; or use load_in_8bit=True, whose layers can be offloaded to the disk"
            if places == ["disk"]
            else ""
        )
        raise ValueError(
            f"The device map sends the {width} layers {misplaced[:10]} to {places}: {why}. Give them more room with "
            "max_memory; or pass a dict device_map, whose offloaded blocks stay unquantized in torch_dtype; or keep "
            f"them unquantized with BnbQuantizationConfig(skip_modules=[...]){eight}."
        )
    return device_map


def load_and_quantize_model(
    model: nn.Module,
    bnb_quantization_config: BnbQuantizationConfig,
    weights_location: str | os.PathLike[str] | None = None,
    device_map: str | Mapping[str, DeviceLike] | None = None,
    no_split_module_classes: list[str] | None = None,
    max_memory: Mapping[Any, int | str] | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
    offload_state_dict: bool = False,
) -> nn.Module:
    """Quantizes ``model``'s linear layers with bitsandbytes (8-bit or 4-bit), loading ``weights_location``.

    Args:
        model: built under ``init_empty_weights()`` (then ``weights_location`` is required), or a
            model with its weights (quantized in place; ``weights_location`` then optional).
        bnb_quantization_config: a :class:`BnbQuantizationConfig`.
        weights_location: a ``.safetensors`` / ``.bin`` file, a shard index, or a folder holding them.
        device_map: a dict (module name -> device), "auto" / "balanced" / "balanced_low_0" /
            "sequential", or None (everything on the current GPU, or on the CPU without one). Blocks
            on ``"disk"`` go to ``offload_folder``: 8-bit layers quantized (int8 values and their
            scales, read back per forward), 4-bit ones unquantized in ``torch_dtype`` (a dict map
            only; an inferred map that needs the disk is refused for 4-bit).
        no_split_module_classes, max_memory: for inferring the device map.
        offload_folder: where disk-offloaded weights go.
        offload_state_dict: park CPU weights on disk while loading (see ``load_checkpoint_in_model``).

    Returns:
        The model, quantized and dispatched (``model.is_loaded_in_8bit`` / ``is_loaded_in_4bit`` set,
        ``model.hf_device_map`` the final map).

    Raises:
        ImportError: bitsandbytes missing or too old (names the pip command).
        TypeError: ``bnb_quantization_config`` is not a ``BnbQuantizationConfig``.
        ValueError: an empty model without ``weights_location``; a device map that sends quantized
            layers where they cannot run (4-bit layers to the disk, any to the CPU beside
            accelerators); a checkpoint that does not fit the model.

    Example:
        >>> with init_empty_weights():
        ...     model = MyModel()
        >>> config = BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")
        >>> model = load_and_quantize_model(model, config, weights_location="ckpt/", device_map="auto")
    """
    from accelerate.big_modeling.dispatch import dispatch_model
    from accelerate.big_modeling.loading import load_checkpoint_in_model

    config = bnb_quantization_config
    if not isinstance(config, BnbQuantizationConfig):
        raise TypeError(
            f"load_and_quantize_model(bnb_quantization_config=...) expects a BnbQuantizationConfig, got "
            f"{type(config).__name__}; build one with BnbQuantizationConfig(load_in_8bit=True) or (load_in_4bit=True)."
        )
    import_bitsandbytes(8 if config.load_in_8bit else 4)
    if device_map is not None and not isinstance(device_map, (str, Mapping)):
        raise TypeError(
            f"load_and_quantize_model(device_map={device_map!r}): expected a dict, one of {_MODES}, or None."
        )
    empty = any(t.device.type == "meta" for t in model.parameters())
    if empty and weights_location is None:
        raise ValueError(
            "load_and_quantize_model: the model's weights are on the meta device (init_empty_weights) and no "
            "weights_location was given; pass weights_location='path/to/checkpoint' (a file, index or folder)."
        )
    keep_in_fp32 = [
        *(config.keep_in_fp32_modules or ()),
        *(getattr(model, "_keep_in_fp32_modules", None) or ()),
    ]
    skip = list(config.skip_modules) if config.skip_modules is not None else get_keys_to_not_convert(model)
    if isinstance(device_map, Mapping):
        skip += _left_unquantized_by_map(config, device_map)
    replace_with_bnb_layers(model, config, modules_to_not_convert=[*skip, *keep_in_fp32])
    model.is_loaded_in_8bit = config.load_in_8bit  # type: ignore[assignment]
    model.is_loaded_in_4bit = config.load_in_4bit  # type: ignore[assignment]
    device_map = get_quantized_model_device_map(
        model, config, device_map, max_memory, no_split_module_classes
    )
    if weights_location is not None:
        # Each weight is quantized as it is placed (bitsandbytes' parameters quantize in .to()).
        load_checkpoint_in_model(
            model,
            weights_location,
            device_map=device_map,
            offload_folder=offload_folder,
            dtype=config.torch_dtype,
            offload_state_dict=offload_state_dict,
            keep_in_fp32_modules=keep_in_fp32,
            offload_8bit_bnb=config.load_in_8bit,
        )
    else:
        cast_unquantized(model, config.torch_dtype, keep_in_fp32)
        for name in quantized_module_names(model):
            device = device_of(f"{name}.weight", device_map)
            # Quantized here; a disk block's int8 weights and scales are written by dispatch_model.
            device = "cpu" if str(device) == "disk" else device
            model.get_submodule(name).to(f"cuda:{device}" if isinstance(device, int) else device)  # quantizes
    return dispatch_model(model, device_map=device_map, offload_dir=offload_folder)


def quantize_and_offload_8bit(
    model: nn.Module,
    param: torch.Tensor,
    param_name: str,
    new_dtype: torch.dtype | None,
    offload_folder: str | os.PathLike[str],
    offload_index: dict[str, Any],
    fp16_statistics: torch.Tensor | None,
) -> None:
    """Writes one weight of an 8-bit model to ``offload_folder`` (recorded in ``offload_index``) and
    leaves the model's tensor on the meta device.

    A weight of a bitsandbytes 8-bit layer is quantized first (int8 values plus its per-row scales,
    stored beside it as ``<module>.SCB``); ``fp16_statistics`` given means ``param`` is already
    int8 with those scales. Other tensors are written in ``new_dtype``.
    """
    from accelerate.big_modeling.offload import offload_weight

    owner = model.get_submodule(param_name.rpartition(".")[0]) if "." in param_name else model
    is_8bit_weight = param_name.endswith("weight") and _is_bnb_layer(owner, "Linear8bitLt")
    scales_name = f"{param_name.rpartition('.')[0]}.SCB" if "." in param_name else "SCB"
    if fp16_statistics is not None:
        offload_weight(param, param_name, offload_folder, index=offload_index)
        offload_weight(fp16_statistics, scales_name, offload_folder, index=offload_index)
    elif is_8bit_weight:
        bnb = import_bitsandbytes(8)
        values, scales, _ = bnb.functional.int8_vectorwise_quant(param.detach().to("cpu", torch.float16))
        offload_weight(values, param_name, offload_folder, index=offload_index)
        offload_weight(scales, scales_name, offload_folder, index=offload_index)
    else:
        value = param.detach().to("cpu")
        if new_dtype is not None and value.is_floating_point():
            value = value.to(new_dtype)
        offload_weight(value, param_name, offload_folder, index=offload_index)
    set_module_tensor_to_device(model, param_name, "meta", value=torch.empty(*param.size(), device="meta"))
