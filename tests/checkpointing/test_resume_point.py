"""load_state(missing_ok=True): one script for the first start and every restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from accelerate import Accelerator
from accelerate.checkpointing import CheckpointError, checkpoint_dir
from accelerate.utils import ProjectConfiguration
from tests.helpers.pool import WorkerPool
from tests.helpers.progress import Progress


def _setup(project: Path) -> tuple[Accelerator, torch.nn.Module, Progress]:
    accelerator = Accelerator(
        project_config=ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True)
    )
    model = accelerator.prepare(torch.nn.Linear(3, 2))
    counter = Progress()
    accelerator.register_for_checkpointing(counter)
    return accelerator, model, counter


def test_first_start_then_restart(tmp_path: Path) -> None:
    accelerator, model, counter = _setup(tmp_path)
    assert accelerator.load_state(missing_ok=True) is None  # first start: nothing yet
    assert accelerator.save_iteration == 0
    with torch.no_grad():
        model.weight.fill_(0.5)
    counter.step = 7
    first = accelerator.save_state()
    assert first == str(checkpoint_dir(tmp_path, 0))
    with torch.no_grad():
        model.weight.fill_(0.25)
    counter.step = 9
    second = accelerator.save_state()

    # A restarted process: fresh objects, the same call.
    restarted, model2, counter2 = _setup(tmp_path)
    assert restarted.load_state(missing_ok=True) == second
    assert counter2.step == 9
    assert torch.equal(model2.weight, torch.full((2, 3), 0.25))
    # Numbering goes on: the next save does not collide with (or overwrite) the loaded one.
    assert restarted.save_state() == str(checkpoint_dir(tmp_path, 2))


def test_without_missing_ok_nothing_to_load_still_raises(tmp_path: Path) -> None:
    accelerator, _, _ = _setup(tmp_path)
    with pytest.raises(FileNotFoundError, match="No committed checkpoint"):
        accelerator.load_state()


def test_a_named_folder_that_does_not_exist(tmp_path: Path) -> None:
    accelerator = Accelerator()
    accelerator.prepare(torch.nn.Linear(3, 2))
    assert accelerator.load_state(str(tmp_path / "nope"), missing_ok=True) is None
    with pytest.raises(FileNotFoundError, match="does not exist"):
        accelerator.load_state(str(tmp_path / "nope"))
    saved = accelerator.save_state(str(tmp_path / "ckpt"))
    assert accelerator.load_state(saved, missing_ok=True) == saved


def test_a_named_folder_that_is_empty_is_nothing_yet_only_with_missing_ok(tmp_path: Path) -> None:
    accelerator = Accelerator()
    accelerator.prepare(torch.nn.Linear(3, 2))
    (tmp_path / "out").mkdir()  # made by the job script before the first start
    assert accelerator.load_state(str(tmp_path / "out"), missing_ok=True) is None
    with pytest.raises(CheckpointError, match="No checkpoint in"):
        accelerator.load_state(str(tmp_path / "out"))
    (tmp_path / "out" / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match="No checkpoint in"):
        accelerator.load_state(str(tmp_path / "out"), missing_ok=True)


def test_numbering_skips_folders_that_were_never_committed(tmp_path: Path) -> None:
    accelerator, _, _ = _setup(tmp_path)
    accelerator.save_state()
    checkpoint_dir(tmp_path, 1).mkdir()  # e.g. an unrelated tool's half-written folder
    restarted, _, _ = _setup(tmp_path)
    assert restarted.load_state(missing_ok=True) == str(checkpoint_dir(tmp_path, 0))
    assert restarted.save_state() == str(checkpoint_dir(tmp_path, 2))
    fresh, _, _ = _setup(tmp_path / "other")
    checkpoint_dir(tmp_path / "other", 0).mkdir(parents=True)
    assert fresh.load_state(missing_ok=True) is None
    assert fresh.save_state() == str(checkpoint_dir(tmp_path / "other", 1))


def resume_with_own_folders(root: str) -> dict[str, Any]:
    """Each rank has its own project folder; only rank 0's holds a checkpoint (an unshared disk)."""
    from accelerate.state import PartialState

    rank = PartialState().process_index
    project = Path(root) / f"rank{rank}"
    if rank == 0:
        checkpoint_dir(project, 0).mkdir(parents=True)
        (checkpoint_dir(project, 0) / "random_states_0.pkl").write_bytes(b"upstream")
    accelerator, _, _ = _setup(project)
    try:
        accelerator.load_state(missing_ok=True)
    except CheckpointError as exc:
        return {"error": str(exc)}
    return {"error": None}


def test_ranks_that_see_different_checkpoints_refuse_together(pool2: WorkerPool, tmp_path: Path) -> None:
    for result in pool2.run(resume_with_own_folders, str(tmp_path)):
        assert result["error"] is not None
        assert "rank 0: checkpoint_0; rank 1: none" in result["error"]


def test_a_named_folder_loads_under_automatic_naming_as_upstream(tmp_path: Path) -> None:
    """load_state(path) with automatic naming on loads that folder (it used to refuse the argument);
    the next automatic save still goes past every existing checkpoint."""
    accelerator, model, counter = _setup(tmp_path / "project")
    for step in (1, 2):
        counter.step = step
        accelerator.save_state()
    first = checkpoint_dir(tmp_path / "project", 0)
    counter.step = 0
    assert accelerator.load_state(str(first)) is not None
    assert counter.step == 1  # the named folder, not the latest (checkpoint_1)
    counter.step = 3
    saved = accelerator.save_state()
    assert Path(saved).name == "checkpoint_2"
    assert accelerator.load_state(str(tmp_path / "missing"), missing_ok=True) is None
