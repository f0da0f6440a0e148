"""fp8 / bitsandbytes / Megatron-LM configurations: built like any config; Megatron-LM refused when used,
fp8's Transformer Engine and MS-AMP recipes refused where their package or an fp8 GPU is missing."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from accelerate import Accelerator
from accelerate.utils import dataclasses as public
from accelerate.utils.dataclasses import (
    MODEL_CONFIGS_TO_MEGATRON_PARSERS,
    AORecipeKwargs,
    BnbQuantizationConfig,
    FP8BackendType,
    FP8RecipeKwargs,
    MegatronLMPlugin,
    MSAMPRecipeKwargs,
    TERecipeKwargs,
    add_model_config_to_megatron_parser,
)
from accelerate.utils.errors import NotAvailableYetError

HANDLERS = [TERecipeKwargs, MSAMPRecipeKwargs, AORecipeKwargs, FP8RecipeKwargs]


def test_public_home_reexports_the_same_objects() -> None:
    from accelerate.precision.fp8 import recipes as fp8_home
    from accelerate.utils import hardware_dataclasses as home

    assert public.MegatronLMPlugin is home.MegatronLMPlugin
    for name in ("TERecipeKwargs", "AORecipeKwargs", "FP8BackendType", "FP8Format", "OptLevel"):
        assert getattr(public, name) is getattr(fp8_home, name)
    from accelerate.big_modeling.quantization import config as bnb_home

    assert public.BnbQuantizationConfig is bnb_home.BnbQuantizationConfig
    import accelerate.utils as utils

    assert utils.BnbQuantizationConfig is BnbQuantizationConfig and utils.MegatronLMPlugin is MegatronLMPlugin


def test_te_recipe_fills_defaults_and_validates() -> None:
    recipe = TERecipeKwargs()
    assert (recipe.margin, recipe.interval, recipe.fp8_format) == (0, 1, "HYBRID")
    assert (recipe.amax_history_len, recipe.amax_compute_algo) == (1024, "most_recent")
    assert recipe.override_linear_precision == (False, False, False)
    assert recipe.to_kwargs() == {}
    assert TERecipeKwargs(fp8_format="e4m3", margin=2).to_kwargs() == {"fp8_format": "E4M3", "margin": 2}
    with pytest.raises(ValueError, match="fp8_format='E6M1'"):
        TERecipeKwargs(fp8_format="E6M1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="amax_compute_algo"):
        TERecipeKwargs(amax_compute_algo="mean")  # type: ignore[arg-type]


def test_msamp_fp8_and_ao_recipes() -> None:
    assert MSAMPRecipeKwargs().opt_level == "O2"
    with pytest.raises(ValueError, match="opt_level='O3'"):
        MSAMPRecipeKwargs(opt_level="O3")  # type: ignore[arg-type]
    assert FP8RecipeKwargs(backend="te").backend == "TE"  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="backend"):
        FP8RecipeKwargs(backend="XLA")  # type: ignore[arg-type]
    assert AORecipeKwargs(pad_inner_dim=True).to_dict()["pad_inner_dim"] is True
    assert FP8BackendType("TE") is FP8BackendType.TE and FP8BackendType.AO == "AO"


def test_bnb_config_validates() -> None:
    config = BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", skip_modules=["lm_head"])
    assert config.bnb_4bit_compute_dtype is torch.float16 and config.llm_int8_threshold == 6.0
    with pytest.raises(ValueError, match="not both"):
        BnbQuantizationConfig(load_in_8bit=True, load_in_4bit=True)
    with pytest.raises(ValueError, match="bnb_4bit_quant_type='int3'"):
        BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_quant_type="int3")
    with pytest.raises(TypeError, match="load_in_8bit"):
        BnbQuantizationConfig(load_in_8bit="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="skip_modules"):
        BnbQuantizationConfig(load_in_8bit=True, skip_modules="lm_head")  # type: ignore[arg-type]
    assert BnbQuantizationConfig(load_in_8bit=True, bnb_4bit_compute_dtype=torch.bfloat16).load_in_8bit


def test_megatron_plugin_holds_configuration() -> None:
    plugin = MegatronLMPlugin(tp_degree=2, pp_degree=2, num_micro_batches=4)
    assert plugin.to_kwargs() == {"tp_degree": 2, "pp_degree": 2, "num_micro_batches": 4}
    assert plugin.eval_iters == 100 and plugin.lr_decay_style == "linear"
    assert len(dataclasses.fields(MegatronLMPlugin)) == 63
    with pytest.raises(NotAvailableYetError, match=r"MegatronLMPlugin.set_training_args.*megatron-core"):
        plugin.set_training_args(micro_batch_size=2, dp_degree=1)


def test_megatron_parser_registry() -> None:
    assert set(MODEL_CONFIGS_TO_MEGATRON_PARSERS) >= {"megatron-bert", "gpt2", "t5", "llama"}

    @add_model_config_to_megatron_parser("tiny-test-model")
    def parse_tiny(plugin: object, model: object, batch: object) -> str:
        return "parsed"

    try:
        assert MODEL_CONFIGS_TO_MEGATRON_PARSERS["tiny-test-model"] is parse_tiny
        assert parse_tiny(None, None, None) == "parsed"
    finally:
        del MODEL_CONFIGS_TO_MEGATRON_PARSERS["tiny-test-model"]
    with pytest.raises(NotAvailableYetError, match="parse_gpt2_config"):
        MODEL_CONFIGS_TO_MEGATRON_PARSERS["gpt2"](MegatronLMPlugin(), None, None)


@pytest.mark.parametrize("handler", HANDLERS, ids=lambda h: h.__name__)
def test_fp8_recipe_without_fp8_mixed_precision_is_named(handler: type) -> None:
    with pytest.raises(ValueError, match=f"{handler.__name__}, an fp8 recipe, but mixed_precision is 'no'"):
        Accelerator(cpu=True, kwargs_handlers=[handler()])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without an fp8 GPU")
@pytest.mark.parametrize(
    "handler", [TERecipeKwargs, MSAMPRecipeKwargs, FP8RecipeKwargs], ids=lambda h: h.__name__
)
def test_gpu_only_fp8_recipes_name_what_is_missing_and_the_torchao_way(handler: type) -> None:
    with pytest.raises(NotAvailableYetError) as info:
        Accelerator(cpu=True, mixed_precision="fp8", kwargs_handlers=[handler()])
    message = str(info.value)
    assert "kwargs_handlers" in message and handler.__name__ in message and "fp8" in message
    assert "NVIDIA GPU with fp8 support" in message and "fp8_backend='AO'" in message


def test_accelerator_refuses_a_megatron_plugin() -> None:
    with pytest.raises(NotAvailableYetError, match="megatron_lm_plugin"):
        Accelerator(cpu=True, megatron_lm_plugin=MegatronLMPlugin(tp_degree=2))


def test_configs_import_without_torch() -> None:
    import subprocess
    import sys

    code = "import sys; import accelerate.utils.dataclasses as d; d.TERecipeKwargs(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
