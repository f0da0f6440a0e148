from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from accelerate.utils import (
    OffloadedWeightsLoader,
    PrefixedDataset,
    extract_submodules_state_dict,
    load_offloaded_weight,
    offload_state_dict,
    offload_weight,
    save_offload_index,
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize("shape", [(3, 4), (5,), ()])
def test_offload_weight_round_trip(tmp_path: Path, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    weight = (torch.randn(shape) * 10).to(dtype)
    index = offload_weight(weight, "layer.weight", tmp_path, index={})
    assert index is not None and index["layer.weight"]["shape"] == list(shape)
    assert index["layer.weight"]["dtype"] == str(dtype).removeprefix("torch.")
    back = load_offloaded_weight(tmp_path / "layer.weight.dat", index["layer.weight"])
    assert back.dtype == dtype and torch.equal(back, weight)


def test_offload_state_dict_and_loader(tmp_path: Path) -> None:
    state = {"a.weight": torch.randn(2, 3), "b.bias": torch.randn(4).to(torch.bfloat16)}
    offload_state_dict(tmp_path, state)
    index = json.loads((tmp_path / "index.json").read_text())
    assert set(index) == set(state)
    save_offload_index({"c": {"dtype": "float32", "shape": [1]}}, tmp_path)  # merged, not replaced
    assert set(json.loads((tmp_path / "index.json").read_text())) == {"a.weight", "b.bias", "c"}
    loader = OffloadedWeightsLoader(state_dict={"mem": torch.ones(1)}, save_folder=tmp_path)
    assert list(loader)[:1] == ["mem"] and len(loader) == 4
    assert torch.equal(loader["a.weight"], state["a.weight"])
    assert torch.equal(loader["b.bias"], state["b.bias"])
    assert torch.equal(loader["mem"], torch.ones(1))


def test_loader_reads_safetensors_in_place(tmp_path: Path) -> None:
    file = tmp_path / "model.safetensors"
    weight = torch.randn(3, 3)
    save_file({"enc.w": weight}, str(file))
    index = {"encoder.weight": {"safetensors_file": str(file), "weight_name": "enc.w", "dtype": "float16"}}
    loader = OffloadedWeightsLoader(index=index)
    value = loader["encoder.weight"]
    assert value.dtype == torch.float16 and torch.equal(value, weight.half())


def test_loader_needs_a_source() -> None:
    with pytest.raises(ValueError, match="state_dict"):
        OffloadedWeightsLoader()


def test_prefixed_dataset_and_extract() -> None:
    state = {"a.x": torch.zeros(1), "a.y": torch.ones(1), "ab.z": torch.ones(2), "b": torch.ones(3)}
    view = PrefixedDataset(state, "a.")
    assert sorted(view) == ["x", "y"] and len(view) == 2 and torch.equal(view["y"], torch.ones(1))
    assert set(extract_submodules_state_dict(state, ["a", "b"])) == {"a.x", "a.y", "b"}
