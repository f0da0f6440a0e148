"""Fault injection: kills at each rename of a commit, full disks, mount points, odd targets, edited
manifests. Every case reproduces a reported failure on real files (issue 17)."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from accelerate import Accelerator
from accelerate.checkpointing import (
    MANIFEST_NAME,
    CheckpointError,
    DiskFullError,
    checkpoint_dir,
    latest_checkpoint,
    load_training_state,
    save_training_state,
    verify_checkpoint,
)
from accelerate.state import PartialState
from accelerate.storage.atomic import INNER_STAGING, OLD_SUFFIX, STAGING_SUFFIX, sibling
from accelerate.utils import ProjectConfiguration
from tests.checkpointing.fault_worker import USER_FILE, USER_TEXT
from tests.checkpointing.harness import Counter, build, set_to, train
from tests.helpers.pool import WorkerPool

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )


def _save(path: Path, step: int, **overrides: Any) -> Path:
    bundle = build()
    train(bundle, 1)
    set_to(bundle, step)
    kwargs = {**bundle.save_kwargs(), **overrides}
    return save_training_state(path, state=PartialState(cpu=True), step=step, **kwargs)


def _load(path: Path) -> tuple[int, Any]:
    bundle = build(seed=1)
    info = load_training_state(path, state=PartialState(cpu=True), **bundle.load_kwargs())
    return int(info["step"]), bundle


def _assert_whole(path: Path, step: int, bundle: Any) -> None:
    """Every piece of the loaded state belongs to one save (model, counter, loader all say ``step``)."""
    for param in bundle.model.parameters():
        assert torch.all(param == float(step)), f"{path}: model not at step {step}"
    assert bundle.counter.value == step and bundle.stateful.position == step, path


# --- 1. commit into a folder holding other files: all-or-nothing at every kill point ----------------
def test_kill_at_every_rename_of_a_commit_loads_one_whole_checkpoint(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tests.checkpointing.fault_worker", str(tmp_path), "foreign", "replace"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    trials = [line.split() for line in out.stdout.splitlines()]
    assert all(outcome in ("killed", "completed") for _, _, outcome in trials), out.stdout
    for scenario in ("foreign", "replace"):
        runs = [(int(n), outcome) for name, n, outcome in trials if name == scenario]
        assert len(runs) >= 5 and runs[-1][1] == "completed", out.stdout  # killed at each step, then done
        seen = set()
        for n, _ in runs:
            target = tmp_path / scenario / f"trial_{n}"
            manifest = verify_checkpoint(target)
            step, bundle = _load(target)
            assert manifest.step == step
            _assert_whole(target, step, bundle)
            seen.add(step)
            if scenario == "foreign":
                assert (target / USER_FILE).read_text() == USER_TEXT  # the user's file is never touched
            # The next save finishes or clears whatever the kill left, and commits cleanly.
            _save(target, 3)
            assert _load(target)[0] == 3
            assert not (target / INNER_STAGING).exists()
            assert sorted(p.name for p in (tmp_path / scenario).iterdir() if p.name.startswith(".")) == []
        assert seen == {1, 2}, f"{scenario}: the kills never landed on both sides of the commit point"


def test_recommit_drops_files_of_the_previous_checkpoint_but_keeps_the_users(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    bundle = build()
    _save(out, 1, custom_objects=[bundle.counter, build().counter])
    assert (out / "custom_checkpoint_1.pkl").exists()
    _save(out, 2)
    assert not (out / "custom_checkpoint_1.pkl").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert verify_checkpoint(out).step == 2


# --- 2. a folder without its manifest -------------------------------------------------------------
def test_our_folder_with_its_manifest_deleted_is_refused(tmp_path: Path) -> None:
    path = _save(tmp_path / "ckpt", 1)
    (path / MANIFEST_NAME).unlink()
    data = bytearray((path / "optimizer.bin").read_bytes())
    data[len(data) // 2] ^= 0x01  # a flipped bit nothing could detect without the manifest
    (path / "optimizer.bin").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"ckpt has no {MANIFEST_NAME} although random_states_0"):
        _load(path)
    # Nor is it ever taken as "latest".
    project = tmp_path / "project"
    _save(checkpoint_dir(project, 0), 0).joinpath(MANIFEST_NAME).unlink()
    assert latest_checkpoint(project) is None


def test_an_older_versions_interrupted_merge_is_refused(tmp_path: Path) -> None:
    path = _save(tmp_path / "out", 1)
    (path / MANIFEST_NAME).unlink()
    for name in ("random_states_0.pkl",):  # upstream-like files only, but our staging folder beside
        torch.save({"random_state": (3, tuple(range(625)), None)}, path / name)
    sibling(path, STAGING_SUFFIX).mkdir()
    with pytest.raises(CheckpointError, match="interrupted save left"):
        _load(path)


def test_an_unverified_load_warns_once_naming_the_folder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.checkpointing.test_training_state import _write_upstream_style

    path = tmp_path / "upstream"
    _write_upstream_style(build(), path, step=4)
    with caplog.at_level(logging.WARNING, logger="accelerate.checkpointing.training_state"):
        step, _ = _load(path)
    assert step == 4
    unverified = [r.getMessage() for r in caplog.records if "unverified: it has no" in r.getMessage()]
    assert len(unverified) == 1 and str(path) in unverified[0]


# --- 3. a crash between the two renames of an older version's swap ----------------------------------
def test_a_checkpoint_left_aside_by_an_interrupted_swap_is_loaded_and_put_back(tmp_path: Path) -> None:
    project = tmp_path / "project"
    target = _save(checkpoint_dir(project, 0), 5)
    target.rename(sibling(target, OLD_SUFFIX))  # the moment between the two renames
    assert latest_checkpoint(project) == target
    step, bundle = _load(target)
    assert step == 5
    _assert_whole(target, 5, bundle)
    accelerator = Accelerator(
        cpu=True,
        project_config=ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True),
    )
    accelerator.register_for_checkpointing(Counter())  # it saved one: nobody receiving it is an error
    accelerator.load_state()
    assert accelerator.step == 5 and accelerator.project_configuration.iteration == 1
    _save(target, 6)  # the next save puts it back first, then replaces it
    assert verify_checkpoint(target).step == 6 and not sibling(target, OLD_SUFFIX).exists()


# --- 4. targets: mount points, "", ".", the working directory ------------------------------------------
@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Any]:
    """Mounts small tmpfs file systems under ``tmp_path`` (skips where mounting is not allowed)."""
    mounted: list[Path] = []

    def mount(name: str, size: str) -> Path:
        point = tmp_path / name
        point.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", f"ckpt-test-{uuid.uuid4().hex[:8]}", str(point)],
            capture_output=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", str(point)], check=False)


def test_save_onto_a_mount_point(tmpfs: Any) -> None:
    point = tmpfs("mnt", "16m")
    assert os.path.ismount(point)
    _save(point, 1)
    _save(point, 2)  # replacing: staged on the mount itself, the mount point is never renamed
    assert _load(point)[0] == 2 and verify_checkpoint(point).step == 2
    assert os.path.ismount(point)


def test_full_disk_names_the_file_the_size_needed_and_the_two_copies(tmpfs: Any) -> None:
    point = tmpfs("small", "1m")
    big = {"w": torch.zeros(150_000)}  # 600 kB: one copy fits, two do not
    _save(point, 1, models_state_dicts=[big])
    with pytest.raises(DiskFullError) as caught:
        _save(point, 2, models_state_dicts=[big])
    message = str(caught.value)
    assert caught.value.code == errno.ENOSPC
    assert "the disk is full (ENOSPC)" in message and "model.safetensors" in message
    assert "needs about 0.6 MB" in message and "stays until the new one is committed" in message
    assert "needs room for two full copies" in message  # the rule the README states too
    # What was written before the disk filled, and what is free once this attempt is cleared away
    # (the old checkpoint's 0.6 MB of 1 MB in use): not the partial file's own bytes.
    figures = re.search(r"failed after (\d+) bytes.*\((\d+\.\d) MB free\)", message)
    assert figures is not None, message
    assert int(figures[1]) > 100_000 and 0.2 < float(figures[2]) < 0.5, message
    # Nothing was committed: the previous checkpoint is intact and the staging folder is gone.
    assert verify_checkpoint(point).step == 1 and not (point / INNER_STAGING).exists()


def test_file_size_limit_is_reported_as_such(tmp_path: Path) -> None:
    # CPython ignores SIGXFSZ, so a write past the limit fails with EFBIG instead of killing.
    script = (
        "import resource, sys, torch\n"
        "from pathlib import Path\n"
        "from accelerate.checkpointing import save_training_state\n"
        "from accelerate.state import PartialState\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))\n"
        "save_training_state(Path(sys.argv[1]), state=PartialState(cpu=True),\n"
        "                    models_state_dicts=[{'w': torch.zeros(100_000)}])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "ckpt")],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("accelerate.storage.errors.DiskFullError"), done.stderr
    assert "model.safetensors" in last and "EFBIG" in last and "needs about 0.4 MB" in last
    assert "unexpected pos" not in last
    assert not (tmp_path / "ckpt").exists()


def test_save_state_to_empty_string_current_and_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('mine')")
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"save_state\(''\) got an empty folder name"):
        accelerator.save_state("")
    with pytest.raises(CheckpointError, match="empty string"):
        load_training_state("", state=PartialState(cpu=True))
    for target in (".", str(tmp_path)):
        accelerator.save_state(target)
        assert os.getcwd() == str(tmp_path)  # the working directory is never replaced
        accelerator.save_state(target)  # ... so a second save works too
    assert (tmp_path / "train.py").read_text() == "print('mine')"
    with torch.no_grad():
        model.weight.zero_()
    accelerator.load_state(".")
    assert verify_checkpoint(".").step == 0 and model.weight.abs().sum() > 0


# --- clear errors --------------------------------------------------------------------------------------
def test_load_from_a_file_or_an_empty_folder(tmp_path: Path) -> None:
    path = _save(tmp_path / "ckpt", 1)
    with pytest.raises(CheckpointError, match="is a file, not a checkpoint folder"):
        _load(path / "optimizer.bin")
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        CheckpointError, match=r"No checkpoint in .*empty.*model\.safetensors.*optimizer\.bin"
    ):
        _load(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        _load(tmp_path / "missing")
    # missing_ok covers a folder not there yet, not a file named by mistake (no silent fresh start).
    accelerator = Accelerator(cpu=True)
    with pytest.raises(CheckpointError, match="is a file, not a checkpoint folder"):
        accelerator.load_state(str(path / "optimizer.bin"), missing_ok=True)
    assert accelerator.load_state(str(tmp_path / "missing"), missing_ok=True) is None


def _edit_manifest(path: Path, edit: Any) -> None:
    data = json.loads((path / MANIFEST_NAME).read_text())
    edit(data)
    (path / MANIFEST_NAME).write_text(json.dumps(data))


def test_unknown_checksum_algorithm_names_the_entry(tmp_path: Path) -> None:
    path = _save(tmp_path / "ckpt", 1)
    _edit_manifest(path, lambda d: d["files"]["scheduler.bin"].update(algorithm="sha9"))
    with pytest.raises(CheckpointError, match=r"entry for 'scheduler\.bin' uses checksum algorithm 'sha9'"):
        _load(path)


def test_an_edited_step_never_reaches_accelerator_step(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(2, 2))
    accelerator.step = 7
    path = Path(accelerator.save_state(str(tmp_path / "ckpt")))
    _edit_manifest(path, lambda d: d.update(step=1000))
    with pytest.raises(CheckpointError, match="modified after it was written"):
        accelerator.load_state(str(path))
    # A manifest from before the self-checksum: the checksummed random-states file gives it away.
    _edit_manifest(path, lambda d: d.pop("manifest_checksum"))
    accelerator.step = 3
    with pytest.raises(CheckpointError, match="says step 1000 but the verified random_states_0.pkl says 7"):
        accelerator.load_state(str(path))
    assert accelerator.step == 3


# --- two ranks committing into an existing folder ----------------------------------------------------
def save_twice_into_a_users_folder(directory: str) -> list[int]:
    state = PartialState()
    target = Path(directory) / "out"
    if state.is_main_process:
        target.mkdir()
        (target / USER_FILE).write_text(USER_TEXT)
    state.wait_for_everyone()
    bundle = build()
    train(bundle, 1)
    steps = []
    for step in (1, 2):
        set_to(bundle, step)
        # Rank 1 writes its random-states file into the staging folder rank 0 chose inside "out".
        save_training_state(target, state=state, step=step, **bundle.save_kwargs())
        restored = build(seed=1)
        steps.append(int(load_training_state(target, state=state, **restored.load_kwargs())["step"]))
        _assert_whole(target, step, restored)
    return steps


def test_two_ranks_commit_into_a_folder_with_user_files(tmp_path: Path, pool2: WorkerPool) -> None:
    assert pool2.run(save_twice_into_a_users_folder, str(tmp_path)) == [[1, 2], [1, 2]]
    manifest = verify_checkpoint(tmp_path / "out")
    assert manifest.world_size == 2 and "random_states_1.pkl" in manifest.files
    assert (tmp_path / "out" / USER_FILE).read_text() == USER_TEXT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert not (tmp_path / "out" / INNER_STAGING).exists()
