"""`accelerate merge-weights` on what save_state writes for an FSDP2-sharded model (2 gloo processes):
the merged file equals the full state dict, from the checkpoint folder or its pytorch_model_fsdp_0."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from accelerate.storage.model_files import load_state_dict_file
from tests.backends.dtensor_io import workers as w
from tests.commands.helpers import run_cli
from tests.conftest import get_pool


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ckpt = tmp_path_factory.mktemp("merge") / "ckpt"
    result = get_pool(2).run(w.save_then_finish, str(ckpt))[0]
    return {"ckpt": ckpt, "model": result["at_save"]["model"]}


def _assert_equal(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name


def test_merging_the_save_state_folder_gives_the_full_state_dict(
    sharded: dict[str, Any], tmp_path: Path
) -> None:
    result = run_cli("merge-weights", str(sharded["ckpt"]), str(tmp_path / "out"), home=tmp_path)
    assert result.returncode == 0, result.stderr
    _assert_equal(sharded["model"], load_state_dict_file(tmp_path / "out" / "model.safetensors"))


def test_merging_the_model_folder_unsafe_and_removing_it(sharded: dict[str, Any], tmp_path: Path) -> None:
    copy = tmp_path / "pytorch_model_fsdp_0"
    shutil.copytree(sharded["ckpt"] / "pytorch_model_fsdp_0", copy)
    args = (
        "merge-weights",
        str(copy),
        str(tmp_path / "out"),
        "--unsafe_serialization",
        "--remove_checkpoint_dir",
    )
    result = run_cli(*args, home=tmp_path)
    assert result.returncode == 0, result.stderr
    _assert_equal(sharded["model"], load_state_dict_file(tmp_path / "out" / "pytorch_model.bin"))
    assert not copy.exists()


def test_a_damaged_shard_is_named_before_merging(sharded: dict[str, Any], tmp_path: Path) -> None:
    copy = tmp_path / "ckpt"
    shutil.copytree(sharded["ckpt"], copy)
    with open(copy / "pytorch_model_fsdp_0" / "__0_0.distcp", "r+b") as handle:
        handle.seek(40)
        byte = handle.read(1)
        handle.seek(40)
        handle.write(bytes([byte[0] ^ 0xFF]))
    result = run_cli("merge-weights", str(copy), str(tmp_path / "out"), home=tmp_path)
    assert result.returncode == 2
    assert "__0_0.distcp is corrupted" in result.stderr
    assert not (tmp_path / "out").exists()
