"""`accelerate merge-weights` on what save_state writes for an FSDP2-sharded model (2 gloo processes):
the merged file equals the full state dict, from the checkpoint folder or its pytorch_model_fsdp_0."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from accelerate.storage.model_files import load_state_dict_file
from tests.backends.dtensor_io import workers as w
from tests.commands.helpers import accelerate_cmd, cli_env
from tests.conftest import get_pool
from tests.helpers.side_by_side import SideBySide, selected_runs

_CASES_OF_TEST = {
    "test_merging_the_save_state_folder_gives_the_full_state_dict": ["save_state_folder"],
    "test_merging_the_model_folder_unsafe_and_removing_it": ["model_folder"],
    "test_a_damaged_shard_is_named_before_merging": ["damaged"],
}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    ckpt = tmp_path_factory.mktemp("merge") / "ckpt"
    result = get_pool(2).run(w.save_then_finish, str(ckpt))[0]
    return {"ckpt": ckpt, "model": result["at_save"]["model"]}


Command = Callable[[Path, int], tuple[list[str], dict[str, str]]]


def _merge(source: Callable[[Path], Path], *flags: str) -> Command:
    """The merge of ``source(folder)`` (the input it prepares in the case's folder) into folder/out."""

    def command(folder: Path, _port: int) -> tuple[list[str], dict[str, str]]:
        return accelerate_cmd("merge-weights", str(source(folder)), str(folder / "out"), *flags), cli_env(
            folder
        )

    return command


@pytest.fixture(scope="module")
def merges(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, sharded: dict[str, Any]
) -> Iterator[SideBySide]:
    """The selected tests' ``accelerate merge-weights`` runs, started side by side (each is mostly one
    interpreter importing torch, so two cores take them in about half the time); each has its own folder."""

    def model_folder(folder: Path) -> Path:
        copy = folder / "pytorch_model_fsdp_0"
        shutil.copytree(sharded["ckpt"] / "pytorch_model_fsdp_0", copy)
        return copy

    def damaged(folder: Path) -> Path:
        copy = folder / "ckpt"
        shutil.copytree(sharded["ckpt"], copy)
        with open(copy / "pytorch_model_fsdp_0" / "__0_0.distcp", "r+b") as handle:
            handle.seek(40)
            byte = handle.read(1)
            handle.seek(40)
            handle.write(bytes([byte[0] ^ 0xFF]))
        return copy

    commands = {
        "save_state_folder": _merge(lambda _folder: sharded["ckpt"]),
        "model_folder": _merge(model_folder, "--unsafe_serialization", "--remove_checkpoint_dir"),
        "damaged": _merge(damaged),
    }
    with selected_runs(
        request, tmp_path_factory.mktemp("merges"), commands, _CASES_OF_TEST,
        at_once=3, timeout=120, reserve_port=lambda: contextlib.nullcontext(0),  # no port: not a launch
    ) as runs:  # fmt: skip
        yield runs


def _assert_equal(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name


def test_merging_the_save_state_folder_gives_the_full_state_dict(
    sharded: dict[str, Any], merges: SideBySide
) -> None:
    result = merges.result("save_state_folder")
    assert result.returncode == 0, result.stderr
    out = merges.folder("save_state_folder") / "out"
    _assert_equal(sharded["model"], load_state_dict_file(out / "model.safetensors"))


def test_merging_the_model_folder_unsafe_and_removing_it(sharded: dict[str, Any], merges: SideBySide) -> None:
    result = merges.result("model_folder")
    assert result.returncode == 0, result.stderr
    folder = merges.folder("model_folder")
    _assert_equal(sharded["model"], load_state_dict_file(folder / "out" / "pytorch_model.bin"))
    assert not (folder / "pytorch_model_fsdp_0").exists()


def test_a_damaged_shard_is_named_before_merging(merges: SideBySide) -> None:
    result = merges.result("damaged")
    assert result.returncode == 2
    assert "__0_0.distcp is corrupted" in result.stderr
    assert not (merges.folder("damaged") / "out").exists()
