"""bitsandbytes on a CUDA GPU: 8-bit and 4-bit loading, offload beside the GPU, and QLoRA through prepare().

Marked ``cuda``: skipped without a GPU (conftest); ``make gpu-check`` runs them on a lent GPU. The
same paths run on the CPU in test_bnb.py, test_bnb_offload.py and test_bnb_training.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from accelerate import Accelerator, init_empty_weights
from accelerate.utils import BnbQuantizationConfig
from accelerate.utils.bnb import load_and_quantize_model
from tests.big_modeling.bnb_models import Net, reference, relative_error, save_checkpoint, train_lora

pytest.importorskip("bitsandbytes")
pytestmark = pytest.mark.cuda

EIGHT = BnbQuantizationConfig(load_in_8bit=True)
FOUR = BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype="fp32")


def _load(folder: Path, config: BnbQuantizationConfig, **kwargs: Any) -> Any:
    with init_empty_weights():
        model = Net()
    return load_and_quantize_model(
        model, config, weights_location=save_checkpoint(reference(), folder), **kwargs
    )


@pytest.mark.parametrize("config, tolerance", [(EIGHT, 0.05), (FOUR, 0.3)], ids=["8bit", "4bit-nf4"])
def test_quantized_model_on_the_gpu(tmp_path: Path, config: BnbQuantizationConfig, tolerance: float) -> None:
    x = torch.randn(8, 32)
    expected = reference()(x)
    model = _load(tmp_path, config)  # no device_map: everything on the current GPU
    assert model.hf_device_map == {"": torch.cuda.current_device()}
    assert model.blocks[0].up.weight.device.type == "cuda"
    with torch.no_grad():
        assert relative_error(model(x.cuda()).cpu(), expected) < tolerance


def test_cpu_blocks_beside_the_gpu_stay_unquantized(tmp_path: Path) -> None:
    x = torch.randn(4, 32)
    expected = reference()(x)
    device_map = {"embed": 0, "blocks.0": 0, "blocks.1": "cpu", "head": 0}
    model = _load(tmp_path, EIGHT, device_map=device_map)
    assert type(model.blocks[0].up).__name__ == "Linear8bitLt"
    assert type(model.blocks[1].up) is nn.Linear  # copied to the GPU per forward, in torch_dtype
    with torch.no_grad():
        assert relative_error(model(x.cuda()).cpu(), expected) < 0.05


def test_8bit_disk_offload_on_the_gpu_matches_the_in_memory_model(tmp_path: Path) -> None:
    x = torch.randn(4, 32).cuda()
    in_memory = _load(tmp_path / "a", EIGHT, device_map={"": 0})
    device_map = {"embed": 0, "blocks.0": "disk", "blocks.1": 0, "head": 0}
    model = _load(tmp_path / "b", EIGHT, device_map=device_map, offload_folder=tmp_path / "offload")
    assert type(model.blocks[0].up).__name__ == "Linear8bitLt"
    with torch.no_grad():
        expected = in_memory(x)
        for _ in range(2):  # the second forward reads the int8 weights and scales again
            torch.testing.assert_close(model(x), expected)
    assert model.blocks[0].up.weight.device.type == "meta" and model.blocks[0].up.state.CB is None


def test_lora_on_a_4bit_base_trains_on_the_gpu(tmp_path: Path) -> None:
    pytest.importorskip("peft")
    base = _load(tmp_path, FOUR, device_map={"": 0})
    _, losses = train_lora(base, Accelerator())
    assert losses[-1] < 0.8 * losses[0]
