"""A checkpoint folder is untrusted input: its manifest can never make a save or a load touch a file
outside it (issue 29, path traversal). Each form of traversal is tried through a real save into the
crafted folder and through a load, and the file outside must survive untouched."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import torch

from accelerate import Accelerator
from accelerate.checkpointing import MANIFEST_NAME, CheckpointError, read_manifest
from accelerate.checkpointing.project import rotate_checkpoints
from accelerate.storage.atomic import INNER_STAGING
from accelerate.storage.durable_io import FileRecord
from accelerate.storage.entry_names import check_entry_name, entry_path
from accelerate.storage.errors import UntrustedCheckpointError
from accelerate.storage.manifest import Manifest
from tests.storage.test_atomic import _commit

_RECORD = FileRecord(size=6, checksum="0", algorithm="crc32")


def _write_manifest(path: Path, names: list[str], *, signed: bool = True) -> None:
    """A manifest listing ``names``, self-checksummed as a real one (the checksum is no secret)."""
    data = Manifest(files=dict.fromkeys(names, _RECORD)).to_json()
    if not signed:
        del data["manifest_checksum"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    outside = tmp_path / "home"
    outside.mkdir()
    target = outside / "victim.txt"
    target.write_text("precious")
    return target


def _save_into(folder: Path) -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    del model
    accelerator.save_state(str(folder))


def _traversals(victim: Path) -> dict[str, str]:
    return {"relative": f"../home/{victim.name}", "absolute": str(victim)}


@pytest.mark.parametrize("form", ["relative", "absolute"])
@pytest.mark.parametrize("signed", [True, False], ids=["signed", "without-self-checksum"])
def test_a_saved_manifest_cannot_make_a_save_delete_outside(
    tmp_path: Path, victim: Path, form: str, signed: bool
) -> None:
    folder = tmp_path / "ckpt"
    _write_manifest(folder / MANIFEST_NAME, [_traversals(victim)[form]], signed=signed)
    with pytest.raises(UntrustedCheckpointError, match=r"victim\.txt") as info:
        _save_into(folder)
    assert str(folder) in str(info.value)
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_a_pending_commit_cannot_move_or_delete_outside(tmp_path: Path, victim: Path, form: str) -> None:
    folder = tmp_path / "ckpt"
    _commit(folder, {"a.bin": b"1"})
    _write_manifest(folder / INNER_STAGING / MANIFEST_NAME, [_traversals(victim)[form]])
    with pytest.raises(UntrustedCheckpointError, match=r"victim\.txt"):
        _save_into(folder)
    assert victim.read_text() == "precious"


def test_a_pending_commit_without_self_checksum_is_not_acted_on(tmp_path: Path, victim: Path) -> None:
    folder = tmp_path / "ckpt"
    _commit(folder, {"a.bin": b"1"})
    (folder / INNER_STAGING / "a.bin").parent.mkdir(parents=True)
    (folder / INNER_STAGING / "a.bin").write_bytes(b"evil")
    _write_manifest(folder / INNER_STAGING / MANIFEST_NAME, ["a.bin"], signed=False)
    with pytest.raises(UntrustedCheckpointError, match="pending commit"):
        _save_into(folder)
    assert (folder / "a.bin").read_bytes() == b"1"


def test_a_symlinked_folder_in_the_manifest_is_not_followed_by_a_save(tmp_path: Path, victim: Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "sub").symlink_to(victim.parent, target_is_directory=True)
    _write_manifest(folder / MANIFEST_NAME, [f"sub/{victim.name}"])
    with pytest.raises(UntrustedCheckpointError, match="symbolic link"):
        _save_into(folder)
    assert victim.read_text() == "precious"


def test_a_symlinked_staging_area_is_refused_not_emptied(tmp_path: Path, victim: Path) -> None:
    folder = tmp_path / "ckpt"
    _commit(folder, {"a.bin": b"1"})
    (folder / INNER_STAGING).symlink_to(victim.parent, target_is_directory=True)
    with pytest.raises(UntrustedCheckpointError, match="symbolic link"):
        _save_into(folder)
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_a_load_reads_no_entry_outside_the_folder(tmp_path: Path, victim: Path, form: str) -> None:
    folder = tmp_path / "ckpt"
    _write_manifest(folder / MANIFEST_NAME, ["model.safetensors", _traversals(victim)[form]])
    with pytest.raises(UntrustedCheckpointError, match=r"victim\.txt"):
        read_manifest(folder)
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(2, 2))
    with pytest.raises(UntrustedCheckpointError):
        accelerator.load_state(str(folder))


def test_a_load_does_not_read_through_a_symlinked_file(tmp_path: Path, victim: Path) -> None:
    folder = _commit(tmp_path / "ckpt", {"a.bin": b"precious"})
    (folder / "a.bin").unlink()
    (folder / "a.bin").symlink_to(victim)
    from accelerate.checkpointing import verify_checkpoint

    with pytest.raises(UntrustedCheckpointError, match="symbolic link"):
        verify_checkpoint(folder)


def test_an_unsigned_older_manifest_loads_with_a_warning_and_deletes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "ckpt"
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    accelerator.save_state(str(folder))
    data = json.loads((folder / MANIFEST_NAME).read_text())
    del data["manifest_checksum"]
    data["files"]["stale_extra.bin"] = data["files"]["model.safetensors"]
    (folder / MANIFEST_NAME).write_text(json.dumps(data))
    (folder / "stale_extra.bin").write_bytes((folder / "model.safetensors").read_bytes())
    with caplog.at_level(logging.WARNING):
        accelerator.load_state(str(folder))
    assert any("older accelerate" in r.getMessage() for r in caplog.records)
    with torch.no_grad():
        model.weight.add_(1)
    accelerator.save_state(str(folder))
    # The older manifest could not vouch for its list: the file it alone named stays.
    assert (folder / "stale_extra.bin").is_file()
    manifest = read_manifest(folder)
    assert manifest is not None and manifest.signed and "stale_extra.bin" not in manifest.files


def test_rotation_removes_a_symlinked_checkpoint_as_a_link(tmp_path: Path, victim: Path) -> None:
    root = tmp_path / "project" / "checkpoints"
    root.mkdir(parents=True)
    (root / "checkpoint_0").symlink_to(victim.parent, target_is_directory=True)
    _commit(root / "checkpoint_1", {"a.bin": b"1"})
    removed = rotate_checkpoints(tmp_path / "project", 1, keep=root / "checkpoint_1")
    assert removed == [root / "checkpoint_0"]
    assert not os.path.lexists(root / "checkpoint_0")
    assert victim.read_text() == "precious"


@pytest.mark.parametrize(
    "name",
    [
        "",
        "..",
        "a/../b",
        "./a",
        "a//b",
        "/etc/passwd",
        "C:x",
        "a\\b",
        "a\x00b",
        MANIFEST_NAME,
        f"{INNER_STAGING}/a",
    ],
)
def test_unsafe_names_are_refused(name: str) -> None:
    with pytest.raises(UntrustedCheckpointError, match="the entry"):
        check_entry_name(name, source="m.json")


def test_non_string_names_are_refused() -> None:
    with pytest.raises(CheckpointError, match="not a string"):
        check_entry_name(3, source="m.json")


@pytest.mark.parametrize("name", ["model.safetensors", "pytorch_model_fsdp_0/__0_0.distcp", "a/.b/c..d"])
def test_ordinary_names_are_accepted(tmp_path: Path, name: str) -> None:
    assert check_entry_name(name, source="m.json") == name
    assert entry_path(tmp_path, name) == tmp_path / name


def test_a_linked_checkpoint_folder_itself_is_fine(tmp_path: Path) -> None:
    real = _commit(tmp_path / "real", {"a.bin": b"1"})
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    _commit(tmp_path / "link", {"a.bin": b"2"}, step=1)
    assert (real / "a.bin").read_bytes() == b"2"
