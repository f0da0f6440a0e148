from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import pytest
import torch

from accelerate.checkpointing import (
    MANIFEST_NAME,
    AtomicCheckpoint,
    CheckpointError,
    is_committed,
    read_manifest,
    verify_checkpoint,
)
from accelerate.storage.atomic import OLD_SUFFIX, recover_interrupted_swap, sibling
from accelerate.storage.durable_io import save_torch, write_bytes
from accelerate.storage.verified_read import read_verified


def _commit(target: Path, files: dict[str, bytes], step: int = 0) -> Path:
    ckpt = AtomicCheckpoint(target)
    ckpt.prepare()
    for name, data in files.items():
        ckpt.add(name, write_bytes(ckpt.path(name), data))
    return ckpt.commit(step=step, world_size=1)


def test_small_writes_are_gathered_in_order_and_the_record_matches_a_rehash(tmp_path: Path) -> None:
    from accelerate.storage.durable_io import write_file
    from accelerate.storage.verified_read import file_record, verify_file

    # Small pieces are gathered, large ones written at once, more than one gathering's worth too.
    chunks = [b"a" * 10, b"b" * 300_000, b"c" * 5, bytes(range(256)) * 2000, b"d", b"e" * 200_000] * 2
    path = tmp_path / "pieces.bin"
    record = write_file(path, lambda sink: [sink.write(chunk) for chunk in chunks])
    assert path.read_bytes() == b"".join(chunks)
    verify_file(path, record)
    assert file_record(path) == record  # hashing the page cache afterwards gives the same record


def test_records_match_the_bytes_on_disk(tmp_path: Path) -> None:
    record = save_torch({"w": torch.arange(10)}, tmp_path / "x.bin")
    data = (tmp_path / "x.bin").read_bytes()
    assert record.size == len(data)
    import xxhash

    assert record.algorithm == "xxh3_64"
    assert record.checksum == xxhash.xxh3_64(data).hexdigest()
    assert torch.equal(torch.load(tmp_path / "x.bin", weights_only=True)["w"], torch.arange(10))


def test_commit_writes_manifest_and_leaves_no_staging(tmp_path: Path) -> None:
    target = _commit(tmp_path / "ckpt", {"a.bin": b"hello", "b.bin": b"world!"}, step=7)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    manifest = read_manifest(target)
    assert manifest is not None and manifest.step == 7 and manifest.world_size == 1
    assert {k: v.size for k, v in manifest.files.items()} == {"a.bin": 5, "b.bin": 6}
    assert json.loads((target / MANIFEST_NAME).read_text())["library"] == "accelerate"
    assert is_committed(target)
    verify_checkpoint(target)


def test_uncommitted_staging_is_not_a_checkpoint_and_is_cleared_next_time(tmp_path: Path) -> None:
    ckpt = AtomicCheckpoint(tmp_path / "ckpt")
    ckpt.prepare()
    write_bytes(ckpt.path("a.bin"), b"partial")
    # A crash here leaves only the hidden staging folder; the real name never exists.
    assert not (tmp_path / "ckpt").exists()
    assert not is_committed(ckpt.staging)
    target = _commit(tmp_path / "ckpt", {"a.bin": b"full"})
    assert (target / "a.bin").read_bytes() == b"full"
    assert not ckpt.staging.exists()


def test_truncated_file_error_names_the_file(tmp_path: Path) -> None:
    target = _commit(tmp_path / "ckpt", {"a.bin": b"x" * 100})
    (target / "a.bin").write_bytes(b"x" * 40)
    with pytest.raises(CheckpointError, match=r"a\.bin.*40 bytes on disk, 100"):
        verify_checkpoint(target)


def test_flipped_byte_error_names_the_file(tmp_path: Path) -> None:
    target = _commit(tmp_path / "ckpt", {"a.bin": b"x" * 100})
    (target / "a.bin").write_bytes(b"x" * 99 + b"y")
    manifest = read_manifest(target)
    assert manifest is not None
    with pytest.raises(CheckpointError, match=r"a\.bin is corrupted"):
        read_verified(target / "a.bin", manifest.files["a.bin"])


def test_missing_file_error_names_the_file(tmp_path: Path) -> None:
    target = _commit(tmp_path / "ckpt", {"a.bin": b"1", "b.bin": b"2"})
    (target / "b.bin").unlink()
    with pytest.raises(CheckpointError, match=r"b\.bin is missing"):
        verify_checkpoint(target)


def test_folder_without_manifest_is_not_committed(tmp_path: Path) -> None:
    (tmp_path / "upstream").mkdir()
    (tmp_path / "upstream" / "optimizer.bin").write_bytes(b"?")
    assert not is_committed(tmp_path / "upstream")
    (tmp_path / "upstream" / MANIFEST_NAME).write_text("{not json")
    assert not is_committed(tmp_path / "upstream")
    with pytest.raises(CheckpointError, match="unreadable"):
        verify_checkpoint(tmp_path / "upstream")


def test_recommit_replaces_a_checkpoint_whole(tmp_path: Path) -> None:
    _commit(tmp_path / "ckpt", {"a.bin": b"old", "only_old.bin": b"1"}, step=1)
    target = _commit(tmp_path / "ckpt", {"a.bin": b"new"}, step=2)
    assert sorted(p.name for p in target.iterdir()) == sorted([MANIFEST_NAME, "a.bin"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_commit_into_a_folder_with_user_files_keeps_them(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    _commit(tmp_path / "out", {"a.bin": b"1"}, step=1)
    target = _commit(tmp_path / "out", {"a.bin": b"2"}, step=2)
    assert (target / "notes.txt").read_text() == "mine"
    assert (target / "a.bin").read_bytes() == b"2"
    assert verify_checkpoint(target).step == 2


def test_crash_between_the_two_renames_is_undone(tmp_path: Path) -> None:
    target = _commit(tmp_path / "ckpt", {"a.bin": b"old"}, step=1)
    target.rename(sibling(target, OLD_SUFFIX))  # the state right after the first rename of a swap
    recover_interrupted_swap(target)
    assert verify_checkpoint(target).step == 1


def test_crc32_records_still_verify(tmp_path: Path) -> None:
    """Checksums recorded as CRC-32 (no xxhash installed when saved) are verified as such."""
    from accelerate.storage.durable_io import FileRecord
    from accelerate.storage.verified_read import verify_file

    path = tmp_path / "x.bin"
    path.write_bytes(b"payload")
    verify_file(path, FileRecord(7, f"{zlib.crc32(b'payload'):08x}", "crc32"))
    with pytest.raises(CheckpointError, match="crc32 checksum"):
        verify_file(path, FileRecord(7, "00000000", "crc32"))


@pytest.mark.parametrize("existing", [False, True])
def test_sub_folders_entries_are_made_durable_before_the_commit_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existing: bool
) -> None:
    # Files in sub-folders (DCP shards) are only reachable after a power cut if their folders' entries
    # were fsynced too. A spy on os.fsync (the real call still runs) records which folders were synced,
    # and in which order relative to the manifest appearing.
    import os

    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def spy_fsync(fd: int) -> None:
        events.append("fsync " + os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def spy_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append(f"replace {Path(src).name} -> {Path(dst).name}")
        real_replace(src, dst)

    target = tmp_path / "ckpt"
    if existing:
        target.mkdir()  # committed in place: the manifest's rename is the commit point
    ckpt = AtomicCheckpoint(target)
    staging = ckpt.prepare()
    (staging / "shards").mkdir()
    ckpt.add("shards/0.distcp", write_bytes(ckpt.path("shards/0.distcp"), b"zero"))
    ckpt.add("top.bin", write_bytes(ckpt.path("top.bin"), b"top"))
    monkeypatch.setattr(os, "fsync", spy_fsync)
    monkeypatch.setattr(os, "replace", spy_replace)
    ckpt.commit(step=1, world_size=1)
    synced = [e for e in events if e == f"fsync {staging / 'shards'}"]
    commit = next(i for i, e in enumerate(events) if e.startswith("replace") and MANIFEST_NAME in e)
    assert synced and events.index(synced[0]) < commit
    verify_checkpoint(target)


@pytest.mark.parametrize("length", [241, 250, 255])
def test_longest_valid_folder_names_save_load_and_save_again(tmp_path: Path, length: int) -> None:
    """A helper folder's suffix must not push a valid 241-255-byte name past the 255-byte limit."""
    from accelerate import Accelerator

    folder = tmp_path / ("é" * 5 + "x" * (length - 10))  # two-byte characters at the head: cut whole
    assert len(str(folder.name).encode()) == length
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    accelerator.save_state(str(folder))
    with torch.no_grad():
        model.weight.add_(1)
    accelerator.save_state(str(folder))  # into the existing folder
    saved = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.zero_()
    accelerator.load_state(str(folder))
    assert torch.equal(model.weight, saved)
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]
    accelerator.save({"w": saved}, str(tmp_path / ("f" * length)))
    assert torch.equal(torch.load(tmp_path / ("f" * length))["w"], saved)


def test_two_long_names_sharing_a_head_get_different_helpers(tmp_path: Path) -> None:
    a, b = tmp_path / ("x" * 250 + "a"), tmp_path / ("x" * 250 + "b")
    assert sibling(a, OLD_SUFFIX) != sibling(b, OLD_SUFFIX)
    assert len(sibling(a, OLD_SUFFIX).name.encode()) <= 255


def test_a_folder_name_that_is_not_utf8_saves_and_loads(tmp_path: Path) -> None:
    """A name of other bytes (Latin-1 from an old system) reaches Python as surrogates; torch's C++
    reader cannot take it (it failed as "truncated or not a torch.save file?"), so it is read instead."""
    from accelerate import Accelerator

    folder = tmp_path / os.fsdecode(b"ckpt-\xe9t\xe9")
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    accelerator.save_state(str(folder))
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    saved_step = optimizer.state_dict()["state"][0]["step"].clone()
    with torch.no_grad():
        model.weight.zero_()
    accelerator.load_state(str(folder))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items())
    assert torch.equal(optimizer.state_dict()["state"][0]["step"], saved_step)
