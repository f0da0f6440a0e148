"""Loading through memory maps: verified from the mapped pages, never writing through to the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from accelerate import Accelerator
from accelerate.checkpointing import verify_checkpoint
from accelerate.storage.errors import CheckpointError
from accelerate.storage.model_files import load_state_dict_file, save_model_files
from accelerate.storage.verified_read import read_verified, verify_file

WIDTH = 512  # 1 MiB per weight: large enough for the mapped path


def _trained(accelerator: Accelerator) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(WIDTH, WIDTH)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    model(torch.randn(2, WIDTH)).sum().backward()
    optimizer.step()
    return model, optimizer


def _moments(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [state["exp_avg"] for state in optimizer.state_dict()["state"].values()]


def test_optimizer_state_is_copied_into_the_tensors_it_already_has(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    _, optimizer = _trained(accelerator)
    accelerator.save_state(str(tmp_path / "ckpt"))
    saved = [m.clone() for m in _moments(optimizer)]
    before = [m.data_ptr() for m in _moments(optimizer)]
    for moment in _moments(optimizer):
        moment.add_(5.0)
    accelerator.load_state(str(tmp_path / "ckpt"))
    assert [m.data_ptr() for m in _moments(optimizer)] == before  # no new memory
    for moment, expected in zip(_moments(optimizer), saved, strict=True):
        assert torch.equal(moment, expected)


def test_a_fresh_optimizer_gets_state_of_its_own_not_the_files_pages(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    _trained(accelerator)
    accelerator.save_state(str(tmp_path / "ckpt"))
    saved = [m.clone() for m in _moments(accelerator._optimizers[0])]

    fresh = Accelerator(cpu=True)
    torch.manual_seed(1)
    model = torch.nn.Linear(WIDTH, WIDTH)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model, optimizer = fresh.prepare(model, optimizer)
    fresh.load_state(str(tmp_path / "ckpt"))
    for moment, expected in zip(_moments(optimizer), saved, strict=True):
        assert torch.equal(moment, expected)
        moment.add_(1.0)  # writable, and writing does not reach the checkpoint
    verify_checkpoint(tmp_path / "ckpt")


def test_mapped_weights_are_writable_without_changing_the_file(tmp_path: Path) -> None:
    save_model_files({"w": torch.ones(WIDTH, WIDTH)}, tmp_path, safe_serialization=True)
    path = tmp_path / "model.safetensors"
    state = load_state_dict_file(path)
    state["w"].add_(1.0)
    assert torch.equal(load_state_dict_file(path)["w"], torch.ones(WIDTH, WIDTH))


def _flip_a_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupted_large_file_is_caught_from_the_mapped_pages(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    _trained(accelerator)
    accelerator.save_state(str(tmp_path / "ckpt"))
    from accelerate.checkpointing import read_manifest

    manifest = read_manifest(tmp_path / "ckpt")
    assert manifest is not None
    for name in ("model.safetensors", "optimizer.bin"):
        path = tmp_path / "ckpt" / name
        record = manifest.files[name]
        assert record.size > 1024 * 1024  # the mapped path
        _flip_a_byte(path, record.size // 2)
        with pytest.raises(CheckpointError, match="corrupted"):
            verify_file(path, record)
        if name.endswith(".safetensors"):
            with pytest.raises(CheckpointError, match="corrupted"):
                read_verified(path, record)
        with pytest.raises(CheckpointError, match=name):
            accelerator.load_state(str(tmp_path / "ckpt"))
        _flip_a_byte(path, record.size // 2)  # repaired for the next file
