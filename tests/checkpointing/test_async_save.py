"""save_state(async_save=True): the same checkpoint as a synchronous save, written in the background."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from accelerate import Accelerator
from accelerate.checkpointing import (
    is_committed,
    latest_checkpoint,
    load_training_state,
    read_manifest,
    verify_checkpoint,
)
from accelerate.checkpointing.async_save import async_save_in_flight
from accelerate.state import PartialState
from accelerate.storage.errors import CheckpointError
from accelerate.utils import ProjectConfiguration
from tests.checkpointing.harness import Counter
from tests.checkpointing.models import TiedNet
from tests.helpers.pool import WorkerPool

REPO = Path(__file__).resolve().parents[2]


def _setup(project: Path | None = None, **config: Any) -> tuple[Accelerator, Any, Any, Any, Counter]:
    torch.manual_seed(0)
    project_config = (
        ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True, **config)
        if project is not None
        else None
    )
    accelerator = Accelerator(cpu=True, project_config=project_config)
    model = TiedNet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    model(torch.randint(0, 10, (4,))).pow(2).mean().backward()
    optimizer.step()
    scheduler.step()
    counter = Counter()
    counter.value = 7
    accelerator.register_for_checkpointing(counter)
    return accelerator, model, optimizer, scheduler, counter


def test_async_save_writes_the_same_files_as_a_synchronous_save(tmp_path: Path) -> None:
    accelerator, model, optimizer, _, counter = _setup()
    accelerator.step = 5
    accelerator.save_state(str(tmp_path / "sync"))
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    path = accelerator.save_state(str(tmp_path / "async"), async_save=True)
    assert Path(path) == (tmp_path / "async").absolute()
    # Training goes on at once: the checkpoint still holds the state at the call.
    with torch.no_grad():
        for param in model.parameters():
            param.add_(1.0)
    optimizer.state_dict()["state"][0]["exp_avg"].add_(1.0)
    counter.value = 99
    accelerator.load_state(str(tmp_path / "async"))  # waits for the writer first
    assert not async_save_in_flight()
    sync, background = read_manifest(tmp_path / "sync"), read_manifest(tmp_path / "async")
    assert sync is not None and background is not None
    assert sorted(sync.files) == sorted(background.files)
    assert background.step == sync.step == 5
    for name, record in sync.files.items():
        if not name.startswith("random_states"):  # the generators moved on between the saves
            assert background.files[name].checksum == record.checksum, name
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, saved[name]), name
    assert counter.value == 7
    verify_checkpoint(tmp_path / "async")


class _Unpicklable:
    def state_dict(self) -> dict[str, Any]:
        return {"callback": lambda: None}  # torch.save cannot pickle a lambda

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@pytest.mark.parametrize("next_call", ["save_state", "load_state", "end_training"])
def test_a_background_error_is_raised_by_the_next_call_naming_the_folder(
    tmp_path: Path, next_call: str
) -> None:
    accelerator, *_ = _setup()
    accelerator.save_state(str(tmp_path / "good"))
    accelerator.register_for_checkpointing(_Unpicklable())
    target = tmp_path / "bad"
    accelerator.save_state(str(target), async_save=True)  # returns; the writer fails later
    calls = {
        "save_state": lambda: accelerator.save_state(str(tmp_path / "next")),
        "load_state": lambda: accelerator.load_state(str(tmp_path / "good")),
        "end_training": accelerator.end_training,
    }
    with pytest.raises(CheckpointError, match="background save_state") as info:
        calls[next_call]()
    assert str(target.absolute()) in str(info.value)
    assert "nothing was committed" in str(info.value)
    assert not target.exists() and not is_committed(target)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # staging removed
    # Raised once: the call after it works.
    accelerator._custom_objects.pop()
    accelerator.save_state(str(tmp_path / "after"))
    assert is_committed(tmp_path / "after")


def test_automatic_naming_rotates_only_after_the_commit(tmp_path: Path) -> None:
    accelerator, model, *_ = _setup(tmp_path, total_limit=2)
    for _ in range(4):
        accelerator.save_state(async_save=True)
        with torch.no_grad():
            model.body.weight.add_(1.0)
    accelerator.end_training()
    folders = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert folders == ["checkpoint_2", "checkpoint_3"]
    for folder in folders:
        verify_checkpoint(tmp_path / "checkpoints" / folder)


def _run_worker(mode: str, project: Path) -> subprocess.Popen[str]:
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    return subprocess.Popen(
        [sys.executable, "-m", "tests.checkpointing.async_worker", mode, str(project)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=env,
        text=True,
    )


def _read_lines(proc: subprocess.Popen[str], wanted: set[str]) -> None:
    assert proc.stdout is not None
    seen: set[str] = set()
    while not wanted <= seen:
        line = proc.stdout.readline()
        if not line:
            proc.wait(timeout=30)
            raise AssertionError(
                f"worker exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}"
            )
        seen.add(line.strip())


def test_sigkill_during_the_background_write_leaves_the_previous_checkpoint_newest(tmp_path: Path) -> None:
    proc = _run_worker("kill", tmp_path)
    try:
        _read_lines(proc, {"returned", "writing"})  # save_state returned; the writer is mid-file
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    latest = latest_checkpoint(tmp_path)
    assert latest is not None and latest.name == "checkpoint_0"
    verify_checkpoint(latest)
    model = torch.nn.Linear(64, 64)
    result = load_training_state(latest, state=PartialState(cpu=True), models=[model])
    assert result["verified"]


def test_exit_waits_for_the_background_writer(tmp_path: Path) -> None:
    proc = _run_worker("exit", tmp_path)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    folder = tmp_path / "checkpoints" / "checkpoint_0"
    assert is_committed(folder), stderr
    verify_checkpoint(folder)


def _async_on_two_ranks(project: str) -> dict[str, Any]:
    config = ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(cpu=True, project_config=config)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    expected = []
    for step in range(3):
        expected.append({k: v.clone() for k, v in model.state_dict().items()})
        accelerator.save_state(async_save=True)
        # Collectives on the training thread while the writers agree through the store.
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        accelerator.gather(torch.tensor([float(step)]))
    accelerator.load_state()  # waits; the newest committed one is checkpoint_2
    loaded = model.state_dict()
    same = all(torch.equal(loaded[k].cpu(), expected[2][k]) for k in loaded)
    accelerator.wait_for_everyone()  # rank 0's writer thread rotated before its load_state returned
    folders = sorted(p.name for p in (Path(project) / "checkpoints").iterdir())
    manifest = read_manifest(Path(project) / "checkpoints" / "checkpoint_2")
    return {
        "same": same,
        "folders": folders,
        "files": sorted(n for n in manifest.files if n.startswith("random_states")) if manifest else None,
    }


def test_two_processes_save_in_the_background_and_load(tmp_path: Path, pool2: WorkerPool) -> None:
    for result in pool2.run(_async_on_two_ranks, str(tmp_path), timeout=120):
        assert result == {
            "same": True,
            "folders": ["checkpoint_1", "checkpoint_2"],
            "files": ["random_states_0.pkl", "random_states_1.pkl"],
        }
