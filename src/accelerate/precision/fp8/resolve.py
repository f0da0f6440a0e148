"""Which fp8 library runs, decided once when the Accelerator is built, and what ``prepare()`` does with it.

Sources, first match wins: a recipe in ``Accelerator(kwargs_handlers=[...])`` (``AORecipeKwargs`` ->
torchao, ``TERecipeKwargs`` -> Transformer Engine, ``MSAMPRecipeKwargs`` -> MS-AMP, the older
``FP8RecipeKwargs`` by its ``backend``); the launcher's ``ACCELERATE_FP8_BACKEND`` (``--fp8_backend``
or ``fp8_config.backend``) with its ``ACCELERATE_FP8_*`` settings; else the first library that can run
here: MS-AMP or Transformer Engine where an fp8 GPU exists, otherwise torchao.

Autocast: as upstream, the model's forward runs under bf16 autocast with every fp8 library; the
converted layers compute their matmuls in float8 inside it, everything else (norms, activations,
unconverted linears) in bf16.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from accelerate.precision.fp8 import ao, msamp, te
from accelerate.precision.fp8.recipes import (
    RECIPE_TYPES,
    AORecipeKwargs,
    FP8BackendType,
    FP8RecipeKwargs,
    MSAMPRecipeKwargs,
    TERecipeKwargs,
)
from accelerate.utils.environment import check_cuda_fp8_capability
from accelerate.utils.imports import is_msamp_available, is_torchao_available, is_transformer_engine_available

_WHERE = "Accelerator(kwargs_handlers=[{}])"


@dataclasses.dataclass
class Fp8Setup:
    """The fp8 library this run uses and its recipe; ``given`` is the handler the script passed, if any."""

    backend: FP8BackendType
    recipe: AORecipeKwargs | TERecipeKwargs | MSAMPRecipeKwargs
    given: Any = None

    def convert_model(self, model: torch.nn.Module, *, sharded: bool) -> torch.nn.Module:
        """Swaps in the library's fp8 layers (torchao, Transformer Engine); MS-AMP converts in
        :meth:`prepare_jointly` instead. ``sharded``: FSDP2 will shard the model."""
        if self.backend is FP8BackendType.AO:
            return ao.convert_for_training(model, self.recipe, sharded=sharded)
        if self.backend is FP8BackendType.TE:
            return te.convert_for_training(model)
        return model

    def wrap_forward(self, model: torch.nn.Module) -> None:
        """Transformer Engine runs the forward inside its fp8_autocast (outside the bf16 autocast)."""
        if self.backend is FP8BackendType.TE:
            te.apply_fp8_autowrap(model, self.recipe)

    def prepare_jointly(self, objects: list[Any], device: torch.device) -> list[Any]:
        """MS-AMP converts the model and its optimizer together, before the rest of ``prepare()``."""
        if self.backend is not FP8BackendType.MSAMP:
            return objects
        return msamp.initialize_together(objects, str(getattr(self.recipe, "opt_level", "O2")), device)


def split_recipes(handlers: Sequence[Any] | None) -> tuple[list[Any], list[Any]]:
    """``(fp8 recipes, other kwargs handlers)`` of ``Accelerator(kwargs_handlers=...)``."""
    recipes = [h for h in handlers or () if isinstance(h, RECIPE_TYPES)]
    others = [h for h in handlers or () if not isinstance(h, RECIPE_TYPES)]
    return recipes, others


def _auto_backend() -> FP8BackendType:
    fp8_gpu = check_cuda_fp8_capability()
    if fp8_gpu and is_msamp_available():
        return FP8BackendType.MSAMP
    if fp8_gpu and is_transformer_engine_available():
        return FP8BackendType.TE
    if is_torchao_available():
        return FP8BackendType.AO
    raise ImportError(
        "mixed_precision='fp8' needs an fp8 library: `pip install torchao` (runs on CPU and GPUs; or "
        "`pip install accelerate[fp8]`), or transformer-engine / msamp on an fp8-capable NVIDIA GPU."
    )


def _from_launch(backend: FP8BackendType, launch: Any) -> AORecipeKwargs | TERecipeKwargs | MSAMPRecipeKwargs:
    """The recipe the launcher's ``ACCELERATE_FP8_*`` variables describe (unset ones keep the defaults)."""
    if backend is FP8BackendType.AO:
        return AORecipeKwargs(
            pad_inner_dim=launch.fp8_pad_inner_dim,
            enable_fsdp_float8_all_gather=launch.fp8_enable_fsdp_float8_all_gather,
        )
    if backend is FP8BackendType.MSAMP:
        return MSAMPRecipeKwargs(opt_level=launch.fp8_opt_level)
    override = launch.fp8_override_linear_precision
    return TERecipeKwargs(
        use_autocast_during_eval=launch.fp8_use_autocast_during_eval,
        margin=launch.fp8_margin,
        interval=launch.fp8_interval,
        fp8_format=launch.fp8_format,
        amax_history_len=launch.fp8_amax_history_len,
        amax_compute_algo=launch.fp8_amax_compute_algo,
        override_linear_precision=_parse_override(override) if override else None,
    )


def _parse_override(text: str) -> tuple[bool, bool, bool]:
    parts = [p.strip().lower() for p in text.strip("()[] ").split(",")]
    if len(parts) != 3 or any(p not in ("true", "false", "1", "0") for p in parts):
        raise ValueError(
            f"ACCELERATE_FP8_OVERRIDE_LINEAR_PRECISION={text!r} must be three booleans, e.g. '(false,false,true)'."
        )
    return (parts[0] in ("true", "1"), parts[1] in ("true", "1"), parts[2] in ("true", "1"))


def _backend_of(recipe: Any) -> FP8BackendType:
    if isinstance(recipe, AORecipeKwargs):
        return FP8BackendType.AO
    if isinstance(recipe, TERecipeKwargs):
        return FP8BackendType.TE
    if isinstance(recipe, MSAMPRecipeKwargs):
        return FP8BackendType.MSAMP
    # FP8RecipeKwargs without a backend: whichever of the two is installed, MS-AMP first (upstream's rule).
    backend = recipe.backend or ("MSAMP" if is_msamp_available() else "TE")
    return FP8BackendType(backend)


def resolve_fp8(
    mode: str, recipes: Sequence[Any], launch: Any, *, deepspeed: bool = False
) -> Fp8Setup | None:
    """The fp8 set-up of a run in ``mode`` (None unless ``mode`` is ``"fp8"``), or a named error.

    Args:
        mode: the resolved mixed-precision mode.
        recipes: the fp8 recipes among ``Accelerator(kwargs_handlers=...)`` (see :func:`split_recipes`).
        launch: the launcher's variables (``accelerate.config.env.LaunchEnv``).
        deepspeed: the run uses DeepSpeed, whose engine builds the model's wrapper itself.
    """
    if len(recipes) > 1:
        names = ", ".join(type(r).__name__ for r in recipes)
        raise ValueError(
            f"kwargs_handlers holds several fp8 recipes ({names}); pass one, for the library to use."
        )
    if mode != "fp8":
        if recipes:
            raise ValueError(
                f"kwargs_handlers holds {type(recipes[0]).__name__}, an fp8 recipe, but mixed_precision is "
                f"{mode!r}: pass mixed_precision='fp8' to train in fp8, or drop the recipe."
            )
        return None
    given = recipes[0] if recipes else None
    if given is not None:
        backend = _backend_of(given)
        where = _WHERE.format(f"{type(given).__name__}(...)")
        recipe = given.to_recipe() if isinstance(given, FP8RecipeKwargs) else given
    else:
        named = (launch.fp8_backend or "").upper()
        if named and named not in FP8BackendType.__members__:
            raise ValueError(f"ACCELERATE_FP8_BACKEND={launch.fp8_backend!r} must be one of AO, TE or MSAMP.")
        backend = FP8BackendType(named) if named and named != "NO" else _auto_backend()
        where = f"fp8_backend={backend.value} from the launcher" if named else "mixed_precision='fp8'"
        recipe = _from_launch(backend, launch)
    if deepspeed:
        # DeepSpeed's engine wraps and steps the model itself; no fp8 conversion is wired into it here.
        raise ValueError(
            f"mixed_precision='fp8' ({where}, fp8_backend={backend.value}) with DeepSpeed is not supported in "
            "this accelerate: train fp8 with DDP or FSDP2 (fsdp_plugin=...), or keep DeepSpeed with "
            "mixed_precision='bf16'."
        )
    if backend is FP8BackendType.TE:
        te.require_transformer_engine(where)
    elif backend is FP8BackendType.MSAMP:
        msamp.require_msamp(where)
    elif not is_torchao_available():
        raise ImportError(f"fp8_backend='AO' ({where}) needs torchao 0.6.1 or newer: `pip install torchao`.")
    return Fp8Setup(backend=backend, recipe=recipe, given=given)
