"""fp8 training with torchao: eligible ``nn.Linear`` layers become torchao ``Float8Linear`` layers.

torchao's float8 linears cast their input, weight and output gradient to float8 with one dynamic
scale per tensor and run the matmuls in float8; the weights stay in high precision (fp32 master
weights), so optimizers, gradient clipping and checkpoints see ordinary tensors. This runs on CPU
(emulated) as well as on fp8 GPUs.

Which layers are converted: upstream's default keeps the model's first and last linear layers in
high precision (converting them costs the most accuracy) and every layer whose input or output
size is not a multiple of 16 (the float8 matmul kernels need that alignment).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from accelerate.utils.imports import is_torchao_available


def find_first_last_linear_layers(model: torch.nn.Module) -> tuple[str | None, str | None]:
    """Qualified names of the first and the last ``nn.Linear`` in ``model`` (registration order)."""
    names = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    return (names[0], names[-1]) if names else (None, None)


def filter_linear_layers(module: torch.nn.Module, fqn: str, layers_to_filter: Sequence[str | None]) -> bool:
    """Whether the layer ``fqn`` should be converted to float8.

    Linear layers whose input or output size is not a multiple of 16 are kept in high precision
    (the float8 matmul kernels need that alignment), and so is every name in ``layers_to_filter``.
    """
    if isinstance(module, torch.nn.Linear) and (module.in_features % 16 or module.out_features % 16):
        return False
    return fqn not in layers_to_filter


def filter_first_and_last_linear_layers(module: torch.nn.Module, fqn: str) -> bool:
    """:func:`filter_linear_layers` that also keeps the model's first and last linear layers in high
    precision (converting them costs the most accuracy); both are looked up within ``module``.
    """
    first, last = find_first_last_linear_layers(module)
    return filter_linear_layers(module, fqn, layers_to_filter=[first, last])


def has_ao_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds torchao ``Float8Linear`` layers (never, without torchao)."""
    if not is_torchao_available():
        return False
    from torchao.float8.float8_linear import Float8Linear

    return any(isinstance(module, Float8Linear) for module in model.modules())


def _require_torchao() -> None:
    if not is_torchao_available():
        raise ImportError(
            "fp8 training with torchao (fp8_backend='AO') needs torchao 0.6.1 or newer: "
            "`pip install torchao` (or `pip install accelerate[fp8]`)."
        )


def default_module_filter(model: torch.nn.Module) -> Callable[[torch.nn.Module, str], bool]:
    """Upstream's default filter for ``model``: its first and last linear layers and misaligned ones stay."""
    first, last = find_first_last_linear_layers(model)
    return functools.partial(filter_linear_layers, layers_to_filter=[first, last])


def float8_config(
    config: Any = None, *, pad_inner_dim: bool | None = None, enable_fsdp_float8_all_gather: bool = False
) -> Any:
    """``config`` as given, else a ``Float8LinearConfig`` with the two flags (torchao's defaults otherwise)."""
    if config is not None:
        return config
    _require_torchao()
    from torchao.float8 import Float8LinearConfig

    return Float8LinearConfig(
        pad_inner_dim=bool(pad_inner_dim), enable_fsdp_float8_all_gather=enable_fsdp_float8_all_gather
    )


def convert_model_to_fp8_ao(
    model: torch.nn.Module, config: Any = None, module_filter_func: Callable[..., bool] | None = None
) -> torch.nn.Module:
    """Converts ``model``'s eligible ``nn.Linear`` layers to torchao ``Float8Linear`` in place.

    Args:
        model: the model; its linear layers are swapped for float8 ones (weights are kept).
        config: a ``torchao.float8.Float8LinearConfig`` (None: torchao's default, tensorwise scaling).
        module_filter_func: ``(module, fqn) -> bool``; None uses :func:`default_module_filter`.

    Returns:
        The model (the same object unless ``model`` itself is a linear layer).

    Example:
        >>> model = convert_model_to_fp8_ao(model)  # first/last and misaligned linears stay as they are
    """
    _require_torchao()
    from torchao.float8 import convert_to_float8_training

    if module_filter_func is None:
        module_filter_func = default_module_filter(model)
    converted: torch.nn.Module = convert_to_float8_training(
        model, config=config, module_filter_fn=module_filter_func
    )
    return converted


def linear_shapes(model: torch.nn.Module) -> list[str]:
    """``name (in x out)`` of each ``nn.Linear`` in ``model``, for error messages."""
    return [
        f"{name or '<root>'} ({module.in_features}x{module.out_features})"
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear)
    ]


def convert_for_training(model: torch.nn.Module, handler: Any, *, sharded: bool) -> torch.nn.Module:
    """What ``prepare()`` does with torchao: converts ``model`` as ``handler`` (an ``AORecipeKwargs``) says.

    ``sharded``: the model will be sharded by FSDP2, where float8 all-gather is on unless the
    handler turns it off. Raises ``ValueError`` when no layer was converted: fp8 would then silently
    train in high precision.
    """
    if has_ao_layers(model):  # converted already (by the user, or an earlier prepare of the same model)
        return model
    all_gather = handler.enable_fsdp_float8_all_gather
    config = float8_config(
        handler.config,
        pad_inner_dim=handler.pad_inner_dim,
        enable_fsdp_float8_all_gather=sharded if all_gather is None else bool(all_gather) and sharded,
    )
    model = convert_model_to_fp8_ao(model, config=config, module_filter_func=handler.module_filter_func)
    if not has_ao_layers(model):
        filter_name = (
            "the default filter (skips the first and last linear layers and those whose sizes are not "
            "multiples of 16)"
            if handler.module_filter_func is None
            else f"module_filter_func={getattr(handler.module_filter_func, '__name__', handler.module_filter_func)!r}"
        )
        shapes = linear_shapes(model)
        raise ValueError(
            f"mixed_precision='fp8' (torchao) converted no layer of {type(model).__name__}: {filter_name} "
            f"left none of its linear layers [{', '.join(shapes) or 'none'}]. Give it at least one "
            "nn.Linear whose sizes are multiples of 16 that is neither first nor last, pass "
            "AORecipeKwargs(module_filter_func=...) that accepts one, or use mixed_precision='bf16'."
        )
    return model
