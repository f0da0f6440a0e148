"""bitsandbytes 8-bit and 4-bit loading on the CPU: accuracy, memory, what stays unquantized, maps, errors."""

from __future__ import annotations

import unittest
from pathlib import Path

import pytest
import torch
from torch import nn

from accelerate import init_empty_weights
from accelerate.test_utils.decorators import require_bnb
from accelerate.utils import BnbQuantizationConfig
from accelerate.utils.bnb import (
    get_keys_to_not_convert,
    get_quantized_model_device_map,
    has_4bit_bnb_layers,
    load_and_quantize_model,
    replace_with_bnb_layers,
)
from tests.big_modeling.bnb_models import Net, reference, relative_error, save_checkpoint, stored_bytes

pytest.importorskip("bitsandbytes")

EIGHT = {"load_in_8bit": True}
FOUR = {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "fp32"}


def _empty() -> Net:
    with init_empty_weights():
        return Net()


@pytest.mark.parametrize(
    "settings, layer_name, tolerance, memory_share",
    [(EIGHT, "Linear8bitLt", 0.05, 0.35), (FOUR, "Linear4bit", 0.3, 0.20)],
    ids=["8bit", "4bit-nf4"],
)
def test_quantized_model_is_close_to_fp32_and_small(
    tmp_path: Path, settings: dict[str, object], layer_name: str, tolerance: float, memory_share: float
) -> None:
    ref = reference()
    x = torch.randn(8, 32)
    expected = ref(x)
    model = load_and_quantize_model(
        _empty(), BnbQuantizationConfig(**settings), weights_location=save_checkpoint(ref, tmp_path)
    )
    assert type(model.blocks[0].up).__name__ == layer_name
    assert type(model.head) is nn.Linear  # the output head stays unquantized by default
    assert model.hf_device_map == {"": "cpu"}
    assert getattr(model, f"is_loaded_in_{'8' if 'load_in_8bit' in settings else '4'}bit") is True
    assert has_4bit_bnb_layers(model) is (layer_name == "Linear4bit")
    with torch.no_grad():
        assert relative_error(model(x), expected) < tolerance
    quantized = [name for name, m in model.named_modules() if type(m).__name__ == layer_name]
    assert len(quantized) == 5  # embed and the 2 x 2 block linears
    ours = sum(stored_bytes(model.get_submodule(n)) for n in quantized)
    full = sum(stored_bytes(ref.get_submodule(n)) for n in quantized)
    assert ours <= memory_share * full


def test_skip_and_keep_in_fp32_modules(tmp_path: Path) -> None:
    ref = reference()
    config = BnbQuantizationConfig(
        **FOUR, skip_modules=["blocks.0", "head"], keep_in_fp32_modules=["blocks.1.down"], torch_dtype="bf16"
    )
    model = load_and_quantize_model(_empty(), config, weights_location=save_checkpoint(ref, tmp_path))
    assert type(model.blocks[0].up) is nn.Linear and model.blocks[0].up.weight.dtype == torch.bfloat16
    assert type(model.blocks[1].down) is nn.Linear and model.blocks[1].down.weight.dtype == torch.float32
    assert type(model.blocks[1].up).__name__ == "Linear4bit"
    assert model.blocks[1].norm.weight.dtype == torch.bfloat16
    assert type(model.embed).__name__ == "Linear4bit"


@pytest.mark.parametrize("fmt, shards", [("safetensors", 3), ("bin", 1), ("bin", 3)])
def test_sharded_and_bin_checkpoints_load_the_same(tmp_path: Path, fmt: str, shards: int) -> None:
    ref = reference()
    x = torch.randn(4, 32)
    whole = load_and_quantize_model(
        _empty(), BnbQuantizationConfig(**EIGHT), weights_location=save_checkpoint(ref, tmp_path / "one")
    )
    other = save_checkpoint(ref, tmp_path / "other", shards=shards, fmt=fmt)
    loaded = load_and_quantize_model(_empty(), BnbQuantizationConfig(**EIGHT), weights_location=other)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), whole(x))


def test_4bit_disk_offload_keeps_offloaded_blocks_unquantized(tmp_path: Path) -> None:
    # bitsandbytes' 4-bit weights cannot be written to an offload folder and read back, so a dict
    # device map's disk blocks stay in torch_dtype (as upstream documents).
    ref = reference()
    x = torch.randn(4, 32)
    device_map = {"embed": "cpu", "blocks.0": "disk", "blocks.1": "cpu", "head": "cpu"}
    model = load_and_quantize_model(
        _empty(),
        BnbQuantizationConfig(**FOUR),
        weights_location=save_checkpoint(ref, tmp_path / "ckpt"),
        device_map=device_map,
        offload_folder=tmp_path / "offload",
    )
    assert type(model.blocks[0].up) is nn.Linear and model.blocks[0].up.weight.device.type == "meta"
    assert type(model.blocks[1].up).__name__ == "Linear4bit"
    assert model.hf_device_map == device_map
    with torch.no_grad():
        assert relative_error(model(x), ref(x)) < 0.3


def test_a_loaded_model_is_quantized_in_place() -> None:
    ref = reference()
    x = torch.randn(4, 32)
    expected = ref(x)
    model = load_and_quantize_model(reference(), BnbQuantizationConfig(**EIGHT))
    assert model.get_submodule("blocks.0.up").weight.dtype == torch.int8
    with torch.no_grad():
        assert relative_error(model(x), expected) < 0.05


def test_keys_to_not_convert() -> None:
    assert get_keys_to_not_convert(Net()) == ["head"]
    tied = Net()
    tied.blocks[0].down.weight = tied.blocks[1].down.weight  # type: ignore[union-attr]  # same shape: a valid tie
    assert set(get_keys_to_not_convert(tied)) == {"blocks.0.down", "blocks.1.down", "head"}

    class BaseModel(Net):
        base_model_prefix = "net"

    assert get_keys_to_not_convert(BaseModel()) == []


def test_replace_with_bnb_layers_matches_whole_names() -> None:
    model = replace_with_bnb_layers(Net(), BnbQuantizationConfig(**EIGHT), modules_to_not_convert=["up"])
    kinds = {name: type(m).__name__ for name, m in model.named_modules() if "Linear" in type(m).__name__}
    assert kinds["blocks.0.up"] == "Linear" and kinds["blocks.0.down"] == "Linear8bitLt"
    assert kinds["head"] == "Linear8bitLt"  # nothing skipped by default here: the caller chose


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="load_in_8bit=True and load_in_4bit=True"):
        BnbQuantizationConfig(load_in_8bit=True, load_in_4bit=True)
    with pytest.raises(ValueError, match="bnb_4bit_quant_type='int4'.*'fp4', 'nf4'"):
        BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_quant_type="int4")
    with pytest.raises(ValueError, match="neither load_in_8bit nor load_in_4bit"):
        BnbQuantizationConfig()
    with pytest.raises(ValueError, match="bnb_4bit_compute_dtype='fp64'"):
        BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_compute_dtype="fp64")
    with pytest.raises(ValueError, match="weights_location"):
        load_and_quantize_model(_empty(), BnbQuantizationConfig(**EIGHT))
    with pytest.raises(TypeError, match="BnbQuantizationConfig"):
        load_and_quantize_model(Net(), {"load_in_8bit": True})
    model = replace_with_bnb_layers(_empty(), BnbQuantizationConfig(**FOUR), modules_to_not_convert=["head"])
    with pytest.raises(ValueError, match=r"4-bit layers \['blocks.0.up'.*to \['disk'\].*load_in_8bit"):
        get_quantized_model_device_map(
            model, BnbQuantizationConfig(**FOUR), {"embed": "cpu", "blocks": "disk", "head": "cpu"}
        )


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"load_in_8bit": "yes"}, r"load_in_8bit='yes'\) must be True or False"),
        (
            {"load_in_4bit": True, "bnb_4bit_use_double_quant": 1},
            r"bnb_4bit_use_double_quant=1\) must be True",
        ),
        ({"load_in_8bit": True, "llm_int8_threshold": "6"}, r"llm_int8_threshold='6'\) must be a number"),
        (
            {"load_in_8bit": True, "skip_modules": "head"},
            r"skip_modules='head'\) must be a list of module names",
        ),
        ({"load_in_8bit": True, "keep_in_fp32_modules": [1]}, r"keep_in_fp32_modules=\[1\]\) must be a list"),
    ],
)
def test_config_field_types_are_checked(settings: dict[str, object], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        BnbQuantizationConfig(**settings)


def test_int8_threshold_with_4bit_warns() -> None:
    with pytest.warns(UserWarning, match="llm_int8_threshold only applies to 8-bit"):
        BnbQuantizationConfig(load_in_4bit=True, llm_int8_threshold=3.0)


def test_require_bnb_runs_where_bitsandbytes_is_installed() -> None:
    ran: list[bool] = []

    class Case(unittest.TestCase):
        @require_bnb
        def test_it(self) -> None:
            ran.append(True)

    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Case).run(result)
    assert ran == [True] and not result.skipped


def test_config_converts_dtype_names() -> None:
    config = BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_compute_dtype="bf16", torch_dtype="fp16")
    assert config.bnb_4bit_compute_dtype is torch.bfloat16 and config.torch_dtype is torch.float16
    assert BnbQuantizationConfig(load_in_8bit=True).target_dtype is torch.int8


def test_missing_bitsandbytes_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate.big_modeling.quantization import layers

    monkeypatch.setattr(layers, "is_bnb_available", lambda *a: False)
    with pytest.raises(ImportError, match="pip install bitsandbytes"):
        load_and_quantize_model(Net(), BnbQuantizationConfig(**EIGHT))
