from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from torch import nn

from accelerate.checkpointing import (
    SAFE_WEIGHTS_INDEX_NAME,
    SAFE_WEIGHTS_NAME,
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
    CheckpointError,
    load_state_dict_file,
    save_model_files,
)
from accelerate.utils import OffloadedWeightsLoader, load_checkpoint_in_model
from tests.checkpointing.models import TiedNet, assert_same_weights


def scrambled(model: nn.Module) -> nn.Module:
    """``model`` with every parameter and buffer overwritten, so a load that did nothing cannot pass."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.fill_(-7)
    return model


@pytest.mark.parametrize("safe", [True, False])
def test_single_file_round_trip_with_tied_weights(tmp_path: Path, safe: bool) -> None:
    torch.manual_seed(0)
    model = TiedNet()
    files = save_model_files(model.state_dict(), tmp_path, safe_serialization=safe)
    assert [f.name for f in files] == [SAFE_WEIGHTS_NAME if safe else WEIGHTS_NAME]
    fresh = scrambled(TiedNet())
    result = load_checkpoint_in_model(fresh, tmp_path, strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert_same_weights(model, fresh)
    assert fresh.head.weight is fresh.embed.weight  # still tied: the parameter was filled in place


def test_tied_weight_is_stored_once_and_file_opens_in_safetensors(tmp_path: Path) -> None:
    save_model_files(TiedNet().state_dict(), tmp_path)
    with safe_open(str(tmp_path / SAFE_WEIGHTS_NAME), framework="pt") as handle:
        keys = set(handle.keys())
        assert handle.metadata()["format"] == "pt"
    assert "embed.weight" in keys and "head.weight" not in keys
    state = load_state_dict_file(tmp_path / SAFE_WEIGHTS_NAME)
    assert torch.equal(state["head.weight"], state["embed.weight"])  # the alias is restored


@pytest.mark.parametrize("safe", [True, False])
def test_sharded_save_loads_into_a_fresh_model(tmp_path: Path, safe: bool) -> None:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8), TiedNet())
    files = save_model_files(model.state_dict(), tmp_path, max_shard_size=200, safe_serialization=safe)
    index_name = SAFE_WEIGHTS_INDEX_NAME if safe else WEIGHTS_INDEX_NAME
    stem, suffix = ("model", "safetensors") if safe else ("pytorch_model", "bin")
    shards = [f.name for f in files if f.name != index_name]
    assert len(shards) > 2
    assert shards[0] == f"{stem}-00001-of-{len(shards):05d}.{suffix}"
    index = json.loads((tmp_path / index_name).read_text())
    assert set(index["weight_map"].values()) == set(shards)
    assert index["metadata"]["total_size"] > 0
    fresh = scrambled(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8), TiedNet()))
    load_checkpoint_in_model(fresh, tmp_path, strict=True)
    assert_same_weights(model, fresh)
    # The index file itself is an accepted checkpoint path too.
    load_checkpoint_in_model(fresh, tmp_path / index_name, strict=True)


def test_resaving_with_fewer_shards_removes_stale_shards(tmp_path: Path) -> None:
    state = nn.Linear(16, 16).state_dict()
    save_model_files(state, tmp_path, max_shard_size=100)
    (tmp_path / "config.json").write_text("{}")
    save_model_files(state, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", SAFE_WEIGHTS_NAME]


def test_non_contiguous_and_sliced_tensors(tmp_path: Path) -> None:
    big = torch.randn(100, 100)
    state = {"t": torch.randn(4, 6).t(), "slice": big[:2]}
    for safe in (True, False):
        save_model_files(state, tmp_path / str(safe), safe_serialization=safe)
    loaded = load_state_dict_file(tmp_path / "True" / SAFE_WEIGHTS_NAME)
    assert torch.equal(loaded["t"], state["t"]) and torch.equal(loaded["slice"], state["slice"])
    # .bin copies the slice instead of writing the whole 100x100 storage.
    assert (tmp_path / "False" / WEIGHTS_NAME).stat().st_size < big.numel() * 4 // 2


def test_only_main_process_writes(tmp_path: Path) -> None:
    assert save_model_files(TiedNet().state_dict(), tmp_path / "x", is_main_process=False) == []
    assert not (tmp_path / "x").exists()


def test_meta_model_device_map_and_dtype(tmp_path: Path) -> None:
    model = TiedNet()
    save_model_files(model.state_dict(), tmp_path)
    with torch.device("meta"):
        empty = TiedNet()
    load_checkpoint_in_model(empty, tmp_path, device_map={"": "cpu"}, dtype=torch.float16, strict=True)
    assert empty.body.weight.device.type == "cpu" and empty.body.weight.dtype == torch.float16
    assert empty.counts.dtype == torch.int64  # integer buffers keep their dtype
    assert empty.head.weight is empty.embed.weight  # the tie survives replacing meta parameters
    assert torch.equal(empty.body.weight, model.body.weight.half())


def test_device_map_by_module_and_disk_offload(tmp_path: Path) -> None:
    model = TiedNet()
    save_model_files(model.state_dict(), tmp_path / "ckpt")
    fresh = scrambled(TiedNet())
    load_checkpoint_in_model(
        fresh,
        tmp_path / "ckpt",
        device_map={"embed": "cpu", "body": "disk", "head": "cpu", "": "cpu"},
        offload_folder=tmp_path / "off",
    )
    index = json.loads((tmp_path / "off" / "index.json").read_text())
    # A safetensors checkpoint is offloaded in place: the index points into its file (no .dat copy).
    assert index["body.weight"]["dtype"] == "float32" and "embed.weight" not in index
    offloaded = OffloadedWeightsLoader(save_folder=tmp_path / "off")["body.weight"]
    assert torch.equal(offloaded, model.body.weight.detach())
    # The modules kept on the CPU were filled from the checkpoint (fresh was scrambled).
    assert torch.equal(fresh.embed.weight, model.embed.weight) and torch.equal(fresh.counts, model.counts)
    with pytest.raises(ValueError, match="offload_folder"):
        load_checkpoint_in_model(TiedNet(), tmp_path / "ckpt", device_map={"": "disk"})
    with pytest.raises(ValueError, match="does not place"):
        load_checkpoint_in_model(TiedNet(), tmp_path / "ckpt", device_map={"embed": "cpu"})


def test_missing_and_unexpected_keys(tmp_path: Path) -> None:
    state = TiedNet().state_dict()
    state["extra.weight"] = torch.ones(1)
    del state["body.bias"]
    save_model_files(state, tmp_path)
    result = load_checkpoint_in_model(TiedNet(), tmp_path)
    assert result.missing_keys == ["body.bias"] and result.unexpected_keys == ["extra.weight"]
    with pytest.raises(
        CheckpointError,
        match=r"missing from the checkpoint: body\.bias; in the checkpoint but not in the model: extra\.weight",
    ):
        load_checkpoint_in_model(TiedNet(), tmp_path, strict=True)


def test_shape_mismatch_names_the_key(tmp_path: Path) -> None:
    save_model_files(TiedNet(width=5).state_dict(), tmp_path)
    with pytest.raises(CheckpointError, match=r"Shape mismatch for '\w+\.\w+': the checkpoint has \(5"):
        load_checkpoint_in_model(TiedNet(width=4), tmp_path)


@pytest.mark.parametrize("suffix", [".pt", ".bin"])
def test_plain_torch_file_and_single_weights_folder(tmp_path: Path, suffix: str) -> None:
    model = TiedNet()
    torch.save(model.state_dict(), tmp_path / f"weights{suffix}")
    fresh = scrambled(TiedNet())
    load_checkpoint_in_model(fresh, tmp_path / f"weights{suffix}", strict=True)
    assert_same_weights(model, fresh)
    load_checkpoint_in_model(fresh, tmp_path, strict=True)  # the folder's only weights file


def test_pickled_code_is_refused(tmp_path: Path) -> None:
    torch.save({"w": torch.ones(1), "obj": TiedNet}, tmp_path / "evil.bin")
    with pytest.raises(CheckpointError, match="evil.bin.*weights_only=True"):
        load_state_dict_file(tmp_path / "evil.bin")


def test_ambiguous_folder_says_what_it_found(tmp_path: Path) -> None:
    torch.save({}, tmp_path / "a.pt")
    torch.save({}, tmp_path / "b.pt")
    with pytest.raises(ValueError, match=r"a\.pt.*b\.pt"):
        load_checkpoint_in_model(TiedNet(), tmp_path)
    with pytest.raises(FileNotFoundError):
        load_checkpoint_in_model(TiedNet(), tmp_path / "nope")
