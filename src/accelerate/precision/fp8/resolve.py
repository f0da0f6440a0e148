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

from accelerate.precision.fp8.libraries import LIBRARIES, Fp8Library, Recipe, library_of
from accelerate.precision.fp8.recipes import RECIPE_TYPES, FP8BackendType, FP8RecipeKwargs
from accelerate.utils.environment import check_cuda_fp8_capability
from accelerate.utils.imports import is_msamp_available, is_torchao_available, is_transformer_engine_available

_WHERE = "Accelerator(kwargs_handlers=[{}])"


@dataclasses.dataclass
class Fp8Setup:
    """The fp8 library this run uses and its recipe; ``given`` is the handler the script passed, if any."""

    library: Fp8Library
    recipe: Recipe
    given: Any = None

    @property
    def backend(self) -> FP8BackendType:
        """The library's ``fp8_backend`` name (what ``Accelerator.fp8_backend`` reports)."""
        return self.library.backend

    def convert_model(self, model: torch.nn.Module, *, sharded: bool) -> torch.nn.Module:
        """Swaps in the library's fp8 layers (torchao, Transformer Engine); MS-AMP converts in
        :meth:`prepare_jointly` instead. ``sharded``: FSDP2 will shard the model."""
        return self.library.convert_model(model, self.recipe, sharded=sharded)

    def wrap_forward(self, model: torch.nn.Module) -> None:
        """Transformer Engine runs the forward inside its fp8_autocast (outside the bf16 autocast)."""
        self.library.wrap_forward(model, self.recipe)

    def prepare_jointly(self, objects: list[Any], device: torch.device) -> list[Any]:
        """MS-AMP converts the model and its optimizer together, before the rest of ``prepare()``."""
        return self.library.prepare_jointly(objects, self.recipe, device)


def split_recipes(handlers: Sequence[Any] | None) -> tuple[list[Any], list[Any]]:
    """``(fp8 recipes, other kwargs handlers)`` of ``Accelerator(kwargs_handlers=...)``."""
    recipes = [h for h in handlers or () if isinstance(h, RECIPE_TYPES)]
    others = [h for h in handlers or () if not isinstance(h, RECIPE_TYPES)]
    return recipes, others


def _auto_library() -> Fp8Library:
    fp8_gpu = check_cuda_fp8_capability()
    if fp8_gpu and is_msamp_available():
        return LIBRARIES[FP8BackendType.MSAMP]
    if fp8_gpu and is_transformer_engine_available():
        return LIBRARIES[FP8BackendType.TE]
    if is_torchao_available():
        return LIBRARIES[FP8BackendType.AO]
    raise ImportError(
        "mixed_precision='fp8' needs an fp8 library: `pip install torchao` (runs on CPU and GPUs; or "
        "`pip install accelerate[fp8]`), or transformer-engine / msamp on an fp8-capable NVIDIA GPU."
    )


def _library_of(recipe: Any) -> Fp8Library:
    library = library_of(recipe)
    if library is not None:
        return library
    # FP8RecipeKwargs without a backend: whichever of the two is installed, MS-AMP first (upstream's rule).
    return LIBRARIES[FP8BackendType(recipe.backend or ("MSAMP" if is_msamp_available() else "TE"))]


def resolve_fp8(
    mode: str, recipes: Sequence[Any], launch: Any, *, refused_by: str | None = None
) -> Fp8Setup | None:
    """The fp8 set-up of a run in ``mode`` (None unless ``mode`` is ``"fp8"``), or a named error.

    Args:
        mode: the resolved mixed-precision mode.
        recipes: the fp8 recipes among ``Accelerator(kwargs_handlers=...)`` (see :func:`split_recipes`).
        launch: the launcher's variables (``accelerate.config.env.LaunchEnv``).
        refused_by: the run's backend that cannot train in fp8 (its ``BackendSpec.label``), if any:
            e.g. DeepSpeed, whose engine builds the model's wrapper itself.
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
        library = _library_of(given)
        where = _WHERE.format(f"{type(given).__name__}(...)")
        recipe = given.to_recipe() if isinstance(given, FP8RecipeKwargs) else given
    else:
        named = (launch.fp8_backend or "").upper()
        if named and named not in FP8BackendType.__members__:
            raise ValueError(f"ACCELERATE_FP8_BACKEND={launch.fp8_backend!r} must be one of AO, TE or MSAMP.")
        library = LIBRARIES[FP8BackendType(named)] if named and named != "NO" else _auto_library()
        where = f"fp8_backend={library.backend.value} from the launcher" if named else "mixed_precision='fp8'"
        recipe = library.recipe_from_launch(launch)
    if refused_by is not None:
        raise ValueError(
            f"mixed_precision='fp8' ({where}, fp8_backend={library.backend.value}) with {refused_by} is not "
            f"supported in this accelerate: train fp8 with DDP or FSDP2 (fsdp_plugin=...), or keep {refused_by} "
            "with mixed_precision='bf16'."
        )
    library.require(where)
    return Fp8Setup(library=library, recipe=recipe, given=given)
