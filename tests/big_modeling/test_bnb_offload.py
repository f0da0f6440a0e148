"""8-bit layers offloaded to the disk: int8 weights and their scales in the offload folder, read back per forward."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from accelerate import init_empty_weights
from accelerate.big_modeling.loading import get_state_dict_offloaded_model
from accelerate.big_modeling.tensors import set_module_tensor_to_device
from accelerate.utils import BnbQuantizationConfig
from accelerate.utils.bnb import load_and_quantize_model
from tests.big_modeling.bnb_models import Net, reference, save_checkpoint

pytest.importorskip("bitsandbytes")

EIGHT = BnbQuantizationConfig(load_in_8bit=True)
FOUR = BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype="fp32")
DISK_MAP = {"embed": "cpu", "blocks.0": "disk", "blocks.1": "cpu", "head": "cpu"}


def _empty() -> Net:
    with init_empty_weights():
        return Net()


def _in_memory(checkpoint: Path) -> Net:
    model: Net = load_and_quantize_model(_empty(), EIGHT, weights_location=checkpoint)
    return model


def test_8bit_layers_go_to_disk_with_their_scales_and_match_the_in_memory_model(tmp_path: Path) -> None:
    checkpoint = save_checkpoint(reference(), tmp_path / "ckpt")
    folder = tmp_path / "offload"
    model = load_and_quantize_model(
        _empty(), EIGHT, weights_location=checkpoint, device_map=DISK_MAP, offload_folder=folder
    )
    up = model.blocks[0].up
    assert type(up).__name__ == "Linear8bitLt" and up.weight.device.type == "meta"
    assert model.hf_device_map == DISK_MAP
    index = json.loads((folder / "index.json").read_text())
    for layer in ("blocks.0.up", "blocks.0.down"):
        assert index[f"{layer}.weight"]["dtype"] == "int8"
        assert index[f"{layer}.SCB"]["shape"] == [model.get_submodule(layer).out_features]
    assert index["blocks.0.norm.weight"]["dtype"] == "float32"  # what is not quantized is offloaded as it is
    # int8 values plus one float32 scale per row: well under 35% of the fp32 weights.
    files = [folder / f"blocks.0.{n}.{t}.dat" for n in ("up", "down") for t in ("weight", "SCB")]
    on_disk = sum(file.stat().st_size for file in files)
    full = sum(model.get_submodule(f"blocks.0.{n}").weight.numel() * 4 for n in ("up", "down"))
    assert on_disk <= 0.35 * full

    x = torch.randn(4, 32)
    expected = _in_memory(checkpoint)(x)
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected, rtol=0, atol=0)
        # Nothing of the offloaded layer stays in memory after forward (bitsandbytes parks its int8
        # weight and scales on the layer's state while it runs), and the next forward reads them again.
        assert up.weight.device.type == "meta" and up.state.CB is None and up.state.SCB is None
        torch.testing.assert_close(model(x), expected, rtol=0, atol=0)


def _with_little_memory(config: BnbQuantizationConfig, folder: Path, cpu_bytes: int) -> tuple[Any, Path]:
    """The model loaded with a map inferred for ``cpu_bytes`` of CPU memory (the rest goes to the disk)."""
    checkpoint = save_checkpoint(reference(), folder / "ckpt")
    memory = {"cpu": cpu_bytes}
    model = load_and_quantize_model(
        _empty(), config, checkpoint, "sequential", max_memory=memory, offload_folder=folder / "offload"
    )
    return model, checkpoint


def test_the_state_dict_of_an_offloaded_8bit_model_holds_the_scales(tmp_path: Path) -> None:
    checkpoint = save_checkpoint(reference(), tmp_path / "ckpt")
    model = load_and_quantize_model(
        _empty(), EIGHT, weights_location=checkpoint, device_map=DISK_MAP, offload_folder=tmp_path / "offload"
    )
    ours = get_state_dict_offloaded_model(model)
    expected = _in_memory(checkpoint).state_dict()
    assert sorted(ours) == sorted(expected)  # blocks.0.up.SCB and weight_format included
    for key, value in expected.items():
        assert torch.equal(ours[key], value), key


def test_an_inferred_map_sends_8bit_layers_to_disk(tmp_path: Path) -> None:
    model, checkpoint = _with_little_memory(EIGHT, tmp_path, 60_000)
    # A whole block and single 8-bit layers (hooked on their own) go to the disk, quantized.
    on_disk = {name for name, device in model.hf_device_map.items() if device == "disk"}
    assert {"blocks.0.up", "blocks.1"} <= on_disk, model.hf_device_map
    assert type(model.blocks[0].up).__name__ == type(model.blocks[1].down).__name__ == "Linear8bitLt"
    x = torch.randn(4, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), _in_memory(checkpoint)(x), rtol=0, atol=0)


def test_4bit_layers_are_refused_on_the_disk(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"4-bit layers \[.*to \['disk'\].*dict device_map.*load_in_8bit"):
        _with_little_memory(FOUR, tmp_path, 30_000)


def test_a_loaded_model_is_quantized_and_offloaded_in_place(tmp_path: Path) -> None:
    x = torch.randn(4, 32)
    expected = load_and_quantize_model(reference(), EIGHT)(x)
    folder = tmp_path / "offload"
    model = load_and_quantize_model(reference(), EIGHT, device_map=DISK_MAP, offload_folder=folder)
    assert type(model.blocks[0].up).__name__ == "Linear8bitLt"
    assert json.loads((folder / "index.json").read_text())["blocks.0.up.weight"]["dtype"] == "int8"
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected, rtol=0, atol=0)


def test_set_module_tensor_to_device_takes_8bit_scales() -> None:
    from bitsandbytes.nn.modules import Linear8bitLt

    linear = nn.Linear(16, 8)
    x = torch.randn(2, 16)
    quantized: Any = Linear8bitLt(16, 8, has_fp16_weights=False)
    quantized.load_state_dict(linear.state_dict())
    quantized = quantized.to("cpu")  # quantizes
    expected = quantized(x)
    values, scales = quantized.state.CB, quantized.state.SCB
    set_module_tensor_to_device(quantized, "weight", "meta")
    quantized.state.CB = quantized.state.SCB = None
    set_module_tensor_to_device(quantized, "weight", "cpu", value=values, fp16_statistics=scales)
    torch.testing.assert_close(quantized(x), expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"fp16_statistics.*'weight'.*Linear.*bitsandbytes 8-bit"):
        set_module_tensor_to_device(linear, "weight", "cpu", value=torch.zeros(8, 16), fp16_statistics=scales)


def test_whole_blocks_and_a_parked_state_dict(tmp_path: Path) -> None:
    checkpoint = save_checkpoint(reference(), tmp_path / "ckpt")
    model = load_and_quantize_model(
        _empty(),
        EIGHT,
        weights_location=checkpoint,
        device_map="sequential",
        no_split_module_classes=["Block"],
        max_memory={"cpu": 100_000},
        offload_folder=tmp_path / "offload",
        offload_state_dict=True,  # CPU weights wait on the disk while the checkpoint streams in
    )
    assert model.hf_device_map == {"embed": "cpu", "blocks": "disk", "head": "disk"}  # no block split
    # The 8-bit input layer was parked unquantized, then quantized when it reached the CPU.
    assert type(model.embed.weight).__name__ == "Int8Params" and model.embed.weight.dtype == torch.int8
    x = torch.randn(4, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), _in_memory(checkpoint)(x), rtol=0, atol=0)
