"""Swapping ``nn.Linear`` layers for bitsandbytes' 8-bit / 4-bit layers, and finding which to leave alone.

bitsandbytes is imported here only inside functions (``import accelerate`` stays fast); a missing
or too old package raises an ``ImportError`` that names the pip command.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

import torch
from torch import nn

from accelerate.big_modeling.tensors import find_tied_parameters
from accelerate.utils.imports import is_4bit_bnb_available, is_8bit_bnb_available, is_bnb_available

if TYPE_CHECKING:
    from accelerate.big_modeling.quantization.config import BnbQuantizationConfig

logger = logging.getLogger(__name__)

_INSTALL = "`pip install bitsandbytes` (or `pip install accelerate[bnb]`)"


def import_bitsandbytes(bits: int | None = None) -> ModuleType:
    """bitsandbytes itself, checked to be recent enough for ``bits``-bit layers (8: 0.37.2+, 4: 0.39+)."""
    if not is_bnb_available():
        raise ImportError(f"bitsandbytes quantization needs the bitsandbytes package: {_INSTALL}.")
    if bits == 4 and not is_4bit_bnb_available():
        raise ImportError(f"4-bit quantization needs bitsandbytes 0.39.0 or newer: {_INSTALL} --upgrade.")
    if bits == 8 and not is_8bit_bnb_available():
        raise ImportError(f"8-bit quantization needs bitsandbytes 0.37.2 or newer: {_INSTALL} --upgrade.")
    import bitsandbytes

    return bitsandbytes


def _is_bnb_layer(module: nn.Module, kind: str) -> bool:
    """Whether ``module`` is a bitsandbytes ``kind`` layer, answered without importing bitsandbytes
    (a model that holds one has imported it already)."""
    for cls in type(module).__mro__:
        if cls.__module__.startswith("bitsandbytes") and cls.__name__ == kind:
            return True
    return False


def has_4bit_bnb_layers(model: nn.Module) -> bool:
    """Whether ``model`` holds bitsandbytes 4-bit linear layers (never, without bitsandbytes)."""
    return any(_is_bnb_layer(module, "Linear4bit") for module in model.modules())


def has_8bit_bnb_layers(model: nn.Module) -> bool:
    """Whether ``model`` holds bitsandbytes 8-bit linear layers."""
    return any(_is_bnb_layer(module, "Linear8bitLt") for module in model.modules())


def module_matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether module ``name`` is, or lies inside, a module named by one of ``patterns``.

    A pattern names whole dotted components anywhere in the path: ``"lm_head"`` matches
    ``"lm_head"`` and ``"model.lm_head"``; ``"attn.out"`` matches ``"blocks.0.attn.out"``, but
    ``"head"`` does not match ``"lm_head"``.
    """
    dotted = f".{name}."
    return any(f".{pattern}." in dotted for pattern in patterns if pattern)


def _quantizable(module: nn.Module) -> bool:
    # MultiheadAttention reads its out_proj weight directly instead of calling the layer, so that
    # layer (torch's NonDynamicallyQuantizableLinear) must stay a plain Linear.
    return isinstance(module, nn.Linear) and not isinstance(
        module, nn.modules.linear.NonDynamicallyQuantizableLinear
    )


def _bnb_layer(bnb: ModuleType, linear: nn.Linear, config: BnbQuantizationConfig) -> nn.Module:
    """The bitsandbytes layer replacing ``linear``, holding its (not yet quantized) weights.

    The layer is built on the meta device (no memory), then given the old weight and bias. A
    weight on the meta device stays there until a checkpoint fills it; a real weight is quantized
    when the layer is moved to its device (bitsandbytes quantizes in ``.to()``).
    """
    has_bias = linear.bias is not None
    if config.load_in_8bit:
        layer = bnb.nn.Linear8bitLt(
            linear.in_features,
            linear.out_features,
            bias=has_bias,
            has_fp16_weights=False,
            threshold=config.llm_int8_threshold,
            device="meta",
        )
        layer.weight = bnb.nn.Int8Params(linear.weight.data, requires_grad=False, has_fp16_weights=False)
    else:
        layer = bnb.nn.Linear4bit(
            linear.in_features,
            linear.out_features,
            bias=has_bias,
            compute_dtype=config.bnb_4bit_compute_dtype,
            compress_statistics=config.bnb_4bit_use_double_quant,
            quant_type=config.bnb_4bit_quant_type,
            device="meta",
        )
        layer.weight = bnb.nn.Params4bit(
            linear.weight.data,
            requires_grad=False,
            compress_statistics=config.bnb_4bit_use_double_quant,
            quant_type=config.bnb_4bit_quant_type,
            module=layer,
        )
    if has_bias:
        layer.bias = nn.Parameter(linear.bias.data, requires_grad=linear.bias.requires_grad)
    layer.train(linear.training)
    swapped: nn.Module = layer  # bitsandbytes has no type information
    return swapped


def replace_with_bnb_layers(
    model: nn.Module,
    bnb_quantization_config: BnbQuantizationConfig,
    modules_to_not_convert: list[str] | None = None,
    current_key_name: list[str] | None = None,
) -> nn.Module:
    """Replaces every ``nn.Linear`` of ``model`` (in place) by bitsandbytes' ``Linear8bitLt`` or ``Linear4bit``.

    Args:
        model: the model; its weights may be on the meta device.
        bnb_quantization_config: which layers to build (8-bit or 4-bit and their settings).
        modules_to_not_convert: module names left as they are (see :func:`module_matches` for how
            names match); default: none.
        current_key_name: the dotted path of ``model`` inside a larger model, as a list of names
            (so ``modules_to_not_convert`` can name modules by their full path).

    Returns:
        ``model`` itself. A warning is logged when no layer was replaced.

    Raises:
        ImportError: bitsandbytes is missing or too old (the message names the pip command).
    """
    config = bnb_quantization_config
    bnb = import_bitsandbytes(8 if config.load_in_8bit else 4)
    skip = list(modules_to_not_convert or ())
    prefix = ".".join(current_key_name or ())
    replaced = 0
    # Collected first: replacing while walking named_modules would walk the new layers too.
    targets = [(name, module) for name, module in model.named_modules() if name and _quantizable(module)]
    for name, linear in targets:
        full_name = f"{prefix}.{name}" if prefix else name
        if module_matches(full_name, skip):
            continue
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, _bnb_layer(bnb, linear, config))
        replaced += 1
    if not replaced:
        logger.warning(
            "replace_with_bnb_layers: no linear layer of %s was replaced (all skipped by %s, or none found); "
            "the model is not quantized.",
            type(model).__name__,
            skip,
        )
    return model


def get_keys_to_not_convert(model: nn.Module) -> list[str]:
    """The modules quantizing would hurt most, left unquantized by default: the output head and tied weights.

    The output head is the module owning the model's last parameter (e.g. ``lm_head``); weights
    tied to another module (an embedding shared with the head) are kept too, since quantizing one
    name of a tied pair would untie it. A transformers *base* model (no head: it lacks the
    attribute named by its ``base_model_prefix``) without tied weights keeps nothing.
    """
    tied = [name for group in find_tied_parameters(model) for name in group]
    prefix = getattr(model, "base_model_prefix", None)
    is_base_model = isinstance(prefix, str) and bool(prefix) and not hasattr(model, prefix)
    if is_base_model and not tied:
        return []
    names = [name for name, _ in model.named_parameters()]
    kept = list(dict.fromkeys([*tied, *names[-1:]]))
    # Parameter names -> module names (what replace_with_bnb_layers matches on).
    return list(dict.fromkeys(_owner(name) for name in kept))


def _owner(parameter_name: str) -> str:
    for suffix in (".weight", ".bias"):
        if parameter_name.endswith(suffix):
            return parameter_name[: -len(suffix)]
    return parameter_name


def quantized_module_names(model: nn.Module) -> list[str]:
    """Names of the bitsandbytes linear layers of ``model``."""
    return [
        name
        for name, module in model.named_modules()
        if _is_bnb_layer(module, "Linear8bitLt") or _is_bnb_layer(module, "Linear4bit")
    ]


def quantize_in_place(model: nn.Module, device: torch.device | str, names: Sequence[str]) -> None:
    """Moves the named bitsandbytes layers (weights already real) to ``device``, which quantizes them."""
    for name in names:
        model.get_submodule(name).to(device)


def parameter_device(module: nn.Module) -> torch.device:
    """The device of ``module``'s first parameter."""
    try:
        return next(module.parameters()).device
    except StopIteration:
        raise ValueError(
            f"get_parameter_device: {type(module).__name__} has no parameters, so it has no device."
        ) from None


def cast_unquantized(model: nn.Module, dtype: torch.dtype | None, keep_in_fp32: Sequence[str]) -> None:
    """Casts the floating weights outside bitsandbytes layers: to float32 under ``keep_in_fp32``,
    else to ``dtype`` (None leaves them as they are). Parameters keep their identity."""
    quantized = quantized_module_names(model)
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        owner = name.rpartition(".")[0]
        if not tensor.is_floating_point() or owner in quantized and name.endswith(".weight"):
            continue
        wanted = torch.float32 if module_matches(owner, keep_in_fp32) else dtype
        if wanted is not None and tensor.dtype != wanted:
            tensor.data = tensor.data.to(wanted)
