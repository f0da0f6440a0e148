from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from accelerate.checkpointing import CheckpointError
from accelerate.storage.durable_io import write_file
from accelerate.storage.safetensors_io import read_safetensors, write_safetensors
from accelerate.storage.verified_read import read_verified


def _tensors() -> dict[str, torch.Tensor]:
    return {
        "f32": torch.randn(3, 5),
        "bf16": torch.randn(7).to(torch.bfloat16),
        "f16_odd": torch.randn(3).half(),
        "i64": torch.arange(4),
        "u8": torch.arange(5, dtype=torch.uint8),
        "flag": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
    }


def test_files_we_write_open_in_the_safetensors_package(tmp_path: Path) -> None:
    tensors = _tensors()
    write_file(
        tmp_path / "x.safetensors", lambda sink: write_safetensors(sink.write, tensors, {"format": "pt"})
    )
    with safe_open(str(tmp_path / "x.safetensors"), framework="pt") as handle:
        assert handle.metadata() == {"format": "pt"}
        for name, tensor in tensors.items():
            assert torch.equal(handle.get_tensor(name), tensor), name


def test_files_the_package_writes_read_back_here(tmp_path: Path) -> None:
    tensors = _tensors()
    save_file(tensors, str(tmp_path / "x.safetensors"), metadata={"k": "v"})
    loaded, metadata = read_safetensors(read_verified(tmp_path / "x.safetensors"), source="x")
    assert metadata == {"k": "v"}
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name], tensor), name


def test_truncated_safetensors_names_the_source(tmp_path: Path) -> None:
    write_file(tmp_path / "x.safetensors", lambda sink: write_safetensors(sink.write, {"w": torch.ones(100)}))
    data = (tmp_path / "x.safetensors").read_bytes()
    with pytest.raises(CheckpointError, match="x.safetensors.*truncated"):
        read_safetensors(bytearray(data[:-10]), source="x.safetensors")
    with pytest.raises(CheckpointError, match="x.safetensors"):
        read_safetensors(bytearray(data[:5]), source="x.safetensors")
