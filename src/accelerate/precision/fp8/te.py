"""fp8 training with NVIDIA Transformer Engine (fp8-capable NVIDIA GPUs: Ada, Hopper or newer).

``prepare()`` swaps ``nn.Linear`` / ``nn.LayerNorm`` for Transformer Engine's layers
(:func:`convert_model`) and runs the model's forward inside ``fp8_autocast`` with the recipe built
from ``TERecipeKwargs`` (:func:`apply_fp8_autowrap`). transformer_engine is imported only here and
only when one of these functions runs; :func:`require_fp8_gpu` says what is missing otherwise.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import torch

from accelerate.utils.environment import check_cuda_fp8_capability
from accelerate.utils.errors import NotAvailableYetError
from accelerate.utils.imports import is_transformer_engine_available


def require_fp8_gpu(backend: str, package: str, installed: bool, where: str) -> None:
    """Raises, naming each missing piece and the torchao alternative, unless ``package`` and an fp8 GPU exist.

    ``where`` says what asked for the backend, e.g. ``"Accelerator(kwargs_handlers=[TERecipeKwargs()])"``.
    """
    missing = []
    if not installed:
        missing.append(f"the {package} package (`pip install {package}`)")
    if not check_cuda_fp8_capability():
        missing.append(
            "an NVIDIA GPU with fp8 support (compute capability 8.9 or newer: Ada, Hopper or newer)"
        )
    if missing:
        raise NotAvailableYetError(
            f"fp8 training with fp8_backend={backend!r} ({where}) needs {' and '.join(missing)}, which this "
            "machine lacks. torchao's fp8 runs here: pass fp8_backend='AO' "
            "(`accelerate launch --mixed_precision fp8 --fp8_backend AO`, or "
            "Accelerator(mixed_precision='fp8', kwargs_handlers=[AORecipeKwargs()]))."
        )


def require_transformer_engine(where: str) -> None:
    require_fp8_gpu("TE", "transformer-engine", is_transformer_engine_available(), where)


def has_transformer_engine_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds Transformer Engine layers (LayerNorm, Linear, TransformerLayer)."""
    if not is_transformer_engine_available():
        return False
    import transformer_engine.pytorch as te

    kinds = (te.LayerNorm, te.Linear, te.TransformerLayer)
    return any(isinstance(module, kinds) for module in model.modules())


def _copy_into(new: torch.nn.Module, old: torch.nn.Module) -> torch.nn.Module:
    new_weight, old_weight = getattr(new, "weight"), getattr(old, "weight")  # noqa: B009 - both are layers with weights
    new_weight.copy_(old_weight)
    old_bias = getattr(old, "bias", None)
    if old_bias is not None:
        getattr(new, "bias").copy_(old_bias)  # noqa: B009
    return new


@torch.no_grad()
def convert_model(
    model: torch.nn.Module,
    to_transformer_engine: bool = True,
    _convert_linear: bool = True,
    _convert_ln: bool = True,
) -> None:
    """Swaps ``model``'s linear and layer-norm layers for Transformer Engine's (or back), in place.

    Linear layers whose sizes are not multiples of 16 stay as they are (Transformer Engine's fp8
    GEMMs need that alignment). Weights are copied, so the model computes the same function.
    """
    if not is_transformer_engine_available():
        raise ImportError("convert_model needs transformer-engine: `pip install transformer-engine`.")
    import transformer_engine.pytorch as te

    for name, child in model.named_children():
        if to_transformer_engine and _convert_linear and type(child) is torch.nn.Linear:
            if child.in_features % 16 or child.out_features % 16:
                continue
            new: torch.nn.Module = te.Linear(
                child.in_features,
                child.out_features,
                bias=child.bias is not None,
                params_dtype=child.weight.dtype,
            )
            setattr(model, name, _copy_into(new, child))
        elif to_transformer_engine and _convert_ln and type(child) is torch.nn.LayerNorm:
            new = te.LayerNorm(child.normalized_shape[0], eps=child.eps, params_dtype=child.weight.dtype)
            setattr(model, name, _copy_into(new, child))
        elif not to_transformer_engine and _convert_linear and isinstance(child, te.Linear):
            new = torch.nn.Linear(
                child.in_features, child.out_features, bias=child.bias is not None, dtype=child.weight.dtype
            )
            setattr(model, name, _copy_into(new, child))
        elif not to_transformer_engine and _convert_ln and isinstance(child, te.LayerNorm):
            new = torch.nn.LayerNorm(child.weight.shape[0], eps=child.eps, dtype=child.weight.dtype)
            setattr(model, name, _copy_into(new, child))
        else:
            convert_model(child, to_transformer_engine, _convert_linear, _convert_ln)


def contextual_fp8_autocast(
    model_forward: Callable[..., Any], fp8_recipe: Any, use_during_eval: bool = False
) -> Callable[..., Any]:
    """A forward (to bind to the model) that runs ``model_forward`` inside Transformer Engine's
    ``fp8_autocast``: in training mode always, in eval mode only with ``use_during_eval``
    (evaluation metrics are usually better in high precision).
    """
    from transformer_engine.pytorch import fp8_autocast

    @functools.wraps(model_forward)
    def forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        with fp8_autocast(enabled=use_during_eval or self.training, fp8_recipe=fp8_recipe):
            return model_forward(*args, **kwargs)

    forward.__wrapped__ = model_forward
    return forward


def build_recipe(handler: Any) -> Any:
    """Transformer Engine's recipe object from a ``TERecipeKwargs`` (or a TE ``FP8RecipeKwargs``)."""
    import transformer_engine.common.recipe as te_recipe

    fp8_format = getattr(te_recipe.Format, handler.fp8_format)
    if handler.use_mxfp8_block_scaling:
        return te_recipe.MXFP8BlockScaling(fp8_format=fp8_format)
    wanted = {
        "margin": handler.margin,
        "interval": handler.interval,
        "amax_history_len": handler.amax_history_len,
        "amax_compute_algo": handler.amax_compute_algo,
        "override_linear_precision": handler.override_linear_precision,
    }
    # Newer Transformer Engine releases dropped some fields (``interval``): pass the ones it takes.
    accepted = inspect.signature(te_recipe.DelayedScaling).parameters
    return te_recipe.DelayedScaling(
        fp8_format=fp8_format, **{k: v for k, v in wanted.items() if k in accepted}
    )


def apply_fp8_autowrap(model: torch.nn.Module, fp8_recipe_handler: Any) -> torch.nn.Module:
    """Makes ``model.forward`` run under ``fp8_autocast`` with the handler's recipe; returns the model."""
    if fp8_recipe_handler is None:
        from accelerate.precision.fp8.recipes import TERecipeKwargs

        fp8_recipe_handler = TERecipeKwargs()
    recipe = build_recipe(fp8_recipe_handler)
    forward = contextual_fp8_autocast(
        model.forward, recipe, bool(fp8_recipe_handler.use_autocast_during_eval)
    )
    model.forward = types.MethodType(forward, model)
    return model


def convert_for_training(model: torch.nn.Module) -> torch.nn.Module:
    """What ``prepare()`` does with Transformer Engine before wrapping: converts the layers once."""
    require_transformer_engine("prepare()")
    if not has_transformer_engine_layers(model):
        convert_model(model)
        model._converted_to_transformer_engine = True  # type: ignore[assignment]
    return model
