"""Training adapters on a 4-bit base (QLoRA) through Accelerator.prepare, and saved state that does not fit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from accelerate import Accelerator, init_empty_weights
from accelerate.utils import BnbQuantizationConfig
from accelerate.utils.bnb import load_and_quantize_model
from tests.big_modeling.bnb_models import Net, reference, save_checkpoint, train_lora

pytest.importorskip("bitsandbytes")
peft = pytest.importorskip("peft")

EIGHT = BnbQuantizationConfig(load_in_8bit=True)
OFFLOAD_REFUSED = (
    r"^You can't train a model that has been loaded in 8-bit or 4-bit precision with CPU or disk offload\. If you "
    r"want train the 8-bit or 4-bit model in CPU, please install bitsandbytes with multi-backend, see "
    r"https://huggingface\.co/docs/bitsandbytes/main/en/installation#multi-backend$"
)
FOUR = BnbQuantizationConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype="fp32")


def _quantized(folder: Path, config: BnbQuantizationConfig = FOUR, **kwargs: object) -> nn.Module:
    with init_empty_weights():
        model = Net()
    checkpoint = save_checkpoint(reference(), folder)
    quantized: nn.Module = load_and_quantize_model(model, config, weights_location=checkpoint, **kwargs)
    return quantized


def test_lora_on_a_4bit_base_trains(tmp_path: Path) -> None:
    base = _quantized(tmp_path)
    frozen = {name: p.detach().clone() for name, p in base.named_parameters()}
    accelerator = Accelerator(cpu=True)
    model, losses = train_lora(base, accelerator)
    assert losses[-1] < 0.8 * losses[0]
    # Only the adapters moved: the quantized base is untouched.
    unwrapped = accelerator.unwrap_model(model).base_model.model  # type: ignore[union-attr]
    assert isinstance(unwrapped, nn.Module)
    for name, p in unwrapped.named_parameters():
        original = name.replace(".base_layer", "")
        if "lora_" not in name and original in frozen:
            assert torch.equal(p.detach(), frozen[original]), name


@pytest.mark.parametrize(
    "width, config", [("8-bit", BnbQuantizationConfig(load_in_8bit=True)), ("4-bit", FOUR)]
)
def test_quantized_state_refuses_an_unquantized_model(
    tmp_path: Path, width: str, config: BnbQuantizationConfig
) -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(_quantized(tmp_path / "ckpt", config))
    accelerator.save_state(str(tmp_path / "state"))
    plain = Accelerator(cpu=True)
    plain.prepare(Net())
    for strict in (True, False):
        mismatch = rf"blocks.0.up was saved as a bitsandbytes {width} layer but is an unquantized Linear"
        with pytest.raises(Exception, match=mismatch):
            plain.load_state(str(tmp_path / "state"), strict=strict)
    assert model is not None


def test_prepare_refuses_a_quantized_model_offloaded_to_disk(tmp_path: Path) -> None:
    model = _quantized(
        tmp_path / "ckpt",
        device_map={"embed": "cpu", "blocks.0": "disk", "blocks.1": "cpu", "head": "cpu"},
        offload_folder=tmp_path / "offload",
    )
    with pytest.raises(ValueError, match=OFFLOAD_REFUSED):
        Accelerator(cpu=True).prepare(model)


def _cpu_offloaded_8bit(folder: Path) -> nn.Module:
    # Loaded on the CPU, then marked as upstream's loaders mark a model with blocks offloaded to the CPU.
    model = _quantized(folder, EIGHT)
    model.hf_device_map = {"embed": 0, "blocks": 0, "head": "cpu"}  # type: ignore[assignment]
    return model


def test_prepare_refuses_an_8bit_model_offloaded_to_cpu_without_multi_backend_bnb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Upstream: CPU offload of a quantized model is refused when bitsandbytes cannot run on the CPU
    # (no multi-backend build) or when an XPU is present; the disk is always refused.
    import accelerate.utils.imports as imports

    model = _cpu_offloaded_8bit(tmp_path / "ckpt")
    monkeypatch.setattr(imports, "is_bitsandbytes_multi_backend_available", lambda: False)
    with pytest.raises(ValueError, match=OFFLOAD_REFUSED):
        Accelerator(cpu=True).prepare(model)
    monkeypatch.setattr(imports, "is_bitsandbytes_multi_backend_available", lambda: True)
    monkeypatch.setattr(imports, "is_xpu_available", lambda check_device=False: True)
    with pytest.raises(ValueError, match=OFFLOAD_REFUSED):
        Accelerator(cpu=True).prepare(model)


def test_prepare_keeps_an_8bit_model_offloaded_to_cpu_with_multi_backend_bnb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import accelerate.utils.imports as imports

    model = _cpu_offloaded_8bit(tmp_path / "ckpt")
    monkeypatch.setattr(imports, "is_bitsandbytes_multi_backend_available", lambda: True)
    monkeypatch.setattr(imports, "is_xpu_available", lambda check_device=False: False)
    assert Accelerator(cpu=True).prepare(model) is not None
