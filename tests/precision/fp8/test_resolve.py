"""Which fp8 library runs (precision/fp8/resolve.py), and the errors that name what is missing."""

from __future__ import annotations

import pytest
import torch

from accelerate.config.env import LaunchEnv
from accelerate.precision.fp8.recipes import (
    AORecipeKwargs,
    FP8BackendType,
    FP8RecipeKwargs,
    MSAMPRecipeKwargs,
    TERecipeKwargs,
)
from accelerate.precision.fp8.resolve import resolve_fp8, split_recipes
from accelerate.utils.dataclasses import AutocastKwargs
from accelerate.utils.errors import NotAvailableYetError

pytest.importorskip("torchao")


def test_split_recipes_keeps_other_handlers() -> None:
    ao, autocast = AORecipeKwargs(), AutocastKwargs()
    assert split_recipes([autocast, ao]) == ([ao], [autocast])
    assert split_recipes(None) == ([], [])


def test_only_fp8_resolves_and_one_recipe_at_most() -> None:
    assert resolve_fp8("bf16", [], LaunchEnv()) is None
    with pytest.raises(ValueError, match="several fp8 recipes"):
        resolve_fp8("fp8", [AORecipeKwargs(), TERecipeKwargs()], LaunchEnv())
    with pytest.raises(ValueError, match="ACCELERATE_FP8_BACKEND='XLA' must be one of AO, TE or MSAMP"):
        resolve_fp8("fp8", [], LaunchEnv(fp8_backend="XLA"))


def test_fp8_with_deepspeed_is_named() -> None:
    with pytest.raises(ValueError, match="with DeepSpeed is not supported.*DDP or FSDP2"):
        resolve_fp8("fp8", [AORecipeKwargs()], LaunchEnv(), refused_by="DeepSpeed")


def test_the_launchers_settings_build_the_recipe() -> None:
    setup = resolve_fp8("fp8", [], LaunchEnv(fp8_backend="ao", fp8_enable_fsdp_float8_all_gather=False))
    assert setup is not None and setup.backend is FP8BackendType.AO and setup.given is None
    assert setup.recipe == AORecipeKwargs(enable_fsdp_float8_all_gather=False)


def test_older_fp8_recipe_maps_to_the_per_library_one() -> None:
    assert FP8RecipeKwargs(backend="TE", margin=2).to_recipe() == TERecipeKwargs(margin=2)
    assert FP8RecipeKwargs(backend="MSAMP", opt_level="O1").to_recipe() == MSAMPRecipeKwargs(opt_level="O1")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without an fp8 GPU")
@pytest.mark.parametrize(
    ("launch", "needles"),
    [
        (
            LaunchEnv(fp8_backend="TE"),
            ["fp8_backend='TE'", "fp8_backend=TE from the launcher", "transformer-engine"],
        ),
        (LaunchEnv(fp8_backend="MSAMP"), ["fp8_backend='MSAMP'", "msamp", "compute capability 8.9"]),
    ],
)
def test_gpu_libraries_name_each_missing_piece_and_torchao(launch: LaunchEnv, needles: list[str]) -> None:
    with pytest.raises(NotAvailableYetError) as info:
        resolve_fp8("fp8", [], launch)
    message = str(info.value)
    for needle in [*needles, "fp8_backend='AO'", "AORecipeKwargs()"]:
        assert needle in message
