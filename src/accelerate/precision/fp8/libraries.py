"""One small object per fp8 library (torchao, Transformer Engine, MS-AMP), each with the same methods.

The resolver (``resolve.py``) chooses one once and ``Fp8Setup`` calls its methods; nothing compares
the library's enum member. A new fp8 library is one subclass here and one entry in :data:`LIBRARIES`.
"""

from __future__ import annotations

from typing import Any

import torch

from accelerate.precision.fp8 import ao, msamp, te
from accelerate.precision.fp8.recipes import AORecipeKwargs, FP8BackendType, MSAMPRecipeKwargs, TERecipeKwargs
from accelerate.utils.imports import is_torchao_available

Recipe = AORecipeKwargs | TERecipeKwargs | MSAMPRecipeKwargs


class Fp8Library:
    """What the run does with one fp8 library; the defaults change nothing."""

    backend: FP8BackendType
    recipe_type: type[Recipe]
    # The Accelerator property (upstream's name) that shows this library's recipe.
    handler_property: str

    def recipe_from_launch(self, launch: Any) -> Recipe:
        """The recipe the launcher's ``ACCELERATE_FP8_*`` settings describe (unset ones keep the defaults)."""
        raise NotImplementedError

    def require(self, where: str) -> None:
        """Raises, naming ``where`` the run asked for it, when the library cannot run here."""

    def convert_model(self, model: torch.nn.Module, recipe: Recipe, *, sharded: bool) -> torch.nn.Module:
        """Swaps in the library's fp8 layers (``sharded``: FSDP2 will shard the model)."""
        return model

    def wrap_forward(self, model: torch.nn.Module, recipe: Recipe) -> None:
        """Wraps the model's forward in the library's own context, where it has one."""

    def prepare_jointly(self, objects: list[Any], recipe: Recipe, device: torch.device) -> list[Any]:
        """Converts objects together before the rest of ``prepare()``, where the library needs that."""
        return objects


class TorchAO(Fp8Library):
    backend = FP8BackendType.AO
    handler_property = "ao_recipe_handler"
    recipe_type = AORecipeKwargs

    def recipe_from_launch(self, launch: Any) -> Recipe:
        return AORecipeKwargs(
            pad_inner_dim=launch.fp8_pad_inner_dim,
            enable_fsdp_float8_all_gather=launch.fp8_enable_fsdp_float8_all_gather,
        )

    def require(self, where: str) -> None:
        if not is_torchao_available():
            raise ImportError(
                f"fp8_backend='AO' ({where}) needs torchao 0.6.1 or newer: `pip install torchao`."
            )

    def convert_model(self, model: torch.nn.Module, recipe: Recipe, *, sharded: bool) -> torch.nn.Module:
        return ao.convert_for_training(model, recipe, sharded=sharded)


class TransformerEngine(Fp8Library):
    backend = FP8BackendType.TE
    handler_property = "te_recipe_handler"
    recipe_type = TERecipeKwargs

    def recipe_from_launch(self, launch: Any) -> Recipe:
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

    def require(self, where: str) -> None:
        te.require_transformer_engine(where)

    def convert_model(self, model: torch.nn.Module, recipe: Recipe, *, sharded: bool) -> torch.nn.Module:
        return te.convert_for_training(model)

    def wrap_forward(self, model: torch.nn.Module, recipe: Recipe) -> None:
        # Transformer Engine runs the forward inside its fp8_autocast (outside the bf16 autocast).
        te.apply_fp8_autowrap(model, recipe)


class MSAMP(Fp8Library):
    backend = FP8BackendType.MSAMP
    handler_property = "msamp_recipe_handler"
    recipe_type = MSAMPRecipeKwargs

    def recipe_from_launch(self, launch: Any) -> Recipe:
        return MSAMPRecipeKwargs(opt_level=launch.fp8_opt_level)

    def require(self, where: str) -> None:
        msamp.require_msamp(where)

    def prepare_jointly(self, objects: list[Any], recipe: Recipe, device: torch.device) -> list[Any]:
        # MS-AMP converts the model and its optimizer together (no model conversion of its own).
        return msamp.initialize_together(objects, str(getattr(recipe, "opt_level", "O2")), device)


# Each library by its ``fp8_backend`` name.
LIBRARIES: dict[FP8BackendType, Fp8Library] = {
    lib.backend: lib for lib in (TorchAO(), TransformerEngine(), MSAMP())
}


def library_of(recipe: Any) -> Fp8Library | None:
    """The library whose recipe class ``recipe`` is (None for the older ``FP8RecipeKwargs``)."""
    return next((lib for lib in LIBRARIES.values() if isinstance(recipe, lib.recipe_type)), None)


def _parse_override(text: str) -> tuple[bool, bool, bool]:
    parts = [p.strip().lower() for p in text.strip("()[] ").split(",")]
    if len(parts) != 3 or any(p not in ("true", "false", "1", "0") for p in parts):
        raise ValueError(
            f"ACCELERATE_FP8_OVERRIDE_LINEAR_PRECISION={text!r} must be three booleans, e.g. '(false,false,true)'."
        )
    return (parts[0] in ("true", "1"), parts[1] in ("true", "1"), parts[2] in ("true", "1"))
