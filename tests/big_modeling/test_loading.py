from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from accelerate import init_empty_weights, load_checkpoint_in_model
from accelerate.utils import OffloadedWeightsLoader, load_state_dict
from tests.big_modeling.tiny_models import TiedLM, reference


def _save(model: torch.nn.Module, folder: Path, drop: tuple[str, ...] = ("head.weight",)) -> Path:
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k not in drop}
    save_file(state, str(folder / "model.safetensors"))
    return folder / "model.safetensors"


def _empty() -> TiedLM:
    with init_empty_weights():
        return TiedLM()


def test_load_state_dict_reads_safetensors_and_bin(tmp_path: Path) -> None:
    ref = reference()
    path = _save(ref, tmp_path)
    state = load_state_dict(path, device_map={"": "cpu"})
    assert torch.equal(state["embed.weight"], ref.embed.weight)
    torch.save(ref.state_dict(), tmp_path / "pytorch_model.bin")
    state = load_state_dict(tmp_path / "pytorch_model.bin")
    assert torch.equal(state["blocks.1.up.weight"], ref.blocks[1].up.weight)


def test_load_into_empty_model_with_cpu_and_disk(tmp_path: Path) -> None:
    ref = reference()
    _save(ref, tmp_path)
    model = _empty()
    device_map = {"embed": "cpu", "head": "cpu", "blocks.0": "cpu", "blocks": "disk", "scale": "cpu"}
    offload = tmp_path / "offload"
    load_checkpoint_in_model(model, tmp_path, device_map=device_map, offload_folder=offload)
    assert torch.equal(model.embed.weight, ref.embed.weight) and model.head.weight is model.embed.weight
    assert torch.equal(model.blocks[0].up.weight, ref.blocks[0].up.weight)
    assert model.blocks[3].up.weight.device.type == "meta"  # on disk, not in memory
    on_disk = OffloadedWeightsLoader(save_folder=offload)
    assert "blocks.3.up.weight" in on_disk and "embed.weight" not in on_disk
    assert torch.equal(on_disk["blocks.3.up.weight"], ref.blocks[3].up.weight)


def test_offload_state_dict_gives_the_same_result(tmp_path: Path) -> None:
    ref = reference()
    _save(ref, tmp_path)
    model = _empty()
    device_map = {"": "cpu", "blocks.5": "disk"}
    load_checkpoint_in_model(
        model, tmp_path, device_map=device_map, offload_folder=tmp_path / "off", offload_state_dict=True
    )
    assert torch.equal(model.blocks[4].down.weight, ref.blocks[4].down.weight)


def test_dtype_and_keep_in_fp32(tmp_path: Path) -> None:
    _save(reference(), tmp_path)
    model = _empty()
    load_checkpoint_in_model(model, tmp_path, dtype=torch.float16, keep_in_fp32_modules=["norm"])
    assert model.blocks[0].up.weight.dtype == torch.float16
    assert model.blocks[0].norm.weight.dtype == torch.float32


def test_missing_weights_are_listed(tmp_path: Path) -> None:
    _save(reference(), tmp_path, drop=("head.weight", "blocks.2.up.weight", "blocks.2.up.bias"))
    with pytest.raises(ValueError, match=r"blocks\.2\.up\.weight, blocks\.2\.up\.bias"):
        load_checkpoint_in_model(_empty(), tmp_path)
    materialised = reference()
    with pytest.raises(ValueError, match=r"missing from the checkpoint: blocks\.2\.up\.weight"):
        load_checkpoint_in_model(materialised, tmp_path, strict=True)
    load_checkpoint_in_model(materialised, tmp_path)  # not strict: real weights stay, a warning is logged


def test_unexpected_weights_with_strict(tmp_path: Path) -> None:
    ref = reference()
    state = {k: v.contiguous() for k, v in ref.state_dict().items() if k != "head.weight"}
    save_file({**state, "extra": torch.zeros(1)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="not in the model: extra"):
        load_checkpoint_in_model(_empty(), tmp_path, strict=True)


def test_disk_without_offload_folder_is_an_error(tmp_path: Path) -> None:
    _save(reference(), tmp_path)
    with pytest.raises(ValueError, match="offload_folder"):
        load_checkpoint_in_model(_empty(), tmp_path, device_map={"": "disk"})


def test_state_dict_of_an_offloaded_model(tmp_path: Path) -> None:
    from accelerate import cpu_offload
    from accelerate.utils.modeling import get_state_dict_offloaded_model

    model = reference()
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    cpu_offload(model, execution_device="cpu", offload_buffers=True)
    assert model.blocks[0].up.weight.device.type == "meta" and model.scale.device.type == "meta"
    state = get_state_dict_offloaded_model(model)
    assert set(state) == set(expected)
    for name, value in state.items():
        assert torch.equal(value, expected[name]), name
    assert model.blocks[0].up.weight.device.type == "meta"  # released again


@pytest.mark.parametrize("safe", [True, False])
def test_sharded_checkpoint_from_save_model_files(tmp_path: Path, safe: bool) -> None:
    from accelerate.checkpointing.model_files import save_model_files

    ref = reference()
    files = save_model_files(ref.state_dict(), tmp_path, max_shard_size="20KB", safe_serialization=safe)
    assert len(files) > 2  # several shards and an index
    model = _empty()
    device_map = {"embed": "cpu", "head": "cpu", "scale": "cpu", "blocks": "disk"}
    load_checkpoint_in_model(model, tmp_path, device_map=device_map, offload_folder=tmp_path / "off", strict=True)
    assert torch.equal(model.embed.weight, ref.embed.weight) and model.head.weight is model.embed.weight
    assert torch.equal(OffloadedWeightsLoader(save_folder=tmp_path / "off")["blocks.5.down.bias"], ref.blocks[5].down.bias)
