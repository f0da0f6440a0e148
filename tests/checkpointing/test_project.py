from __future__ import annotations

from pathlib import Path

import pytest

from accelerate.checkpointing import (
    AtomicCheckpoint,
    checkpoint_dir,
    latest_checkpoint,
    list_checkpoints,
    next_iteration,
    rotate_checkpoints,
)
from accelerate.storage.durable_io import write_bytes


def _commit(project: Path, i: int) -> Path:
    ckpt = AtomicCheckpoint(checkpoint_dir(project, i))
    ckpt.prepare()
    ckpt.add("optimizer.bin", write_bytes(ckpt.path("optimizer.bin"), str(i).encode()))
    return ckpt.commit(step=i, world_size=1)


def _legacy(project: Path, i: int) -> Path:
    path = checkpoint_dir(project, i)
    path.mkdir(parents=True)
    (path / "random_states_0.pkl").write_bytes(b"upstream")
    return path


def test_automatic_names(tmp_path: Path) -> None:
    assert checkpoint_dir(tmp_path, 3) == tmp_path / "checkpoints" / "checkpoint_3"
    assert next_iteration(tmp_path) == 0
    _commit(tmp_path, 0)
    _commit(tmp_path, 10)
    _commit(tmp_path, 2)
    # Numeric order, not string order (checkpoint_10 is newer than checkpoint_2).
    assert [i for i, _ in list_checkpoints(tmp_path)] == [0, 2, 10]
    assert next_iteration(tmp_path) == 11
    assert latest_checkpoint(tmp_path) == checkpoint_dir(tmp_path, 10)
    with pytest.raises(ValueError):
        checkpoint_dir(tmp_path, -1)


def test_latest_skips_uncommitted_folders(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    _commit(tmp_path, 1)
    _legacy(tmp_path, 2)  # no manifest: a newer committed checkpoint always wins over it
    (checkpoint_dir(tmp_path, 3)).mkdir()  # empty: not a checkpoint at all
    assert latest_checkpoint(tmp_path) == checkpoint_dir(tmp_path, 1)


def test_latest_falls_back_to_upstream_folders_only_when_none_is_committed(tmp_path: Path) -> None:
    _legacy(tmp_path, 4)
    _legacy(tmp_path, 5)
    checkpoint_dir(tmp_path, 6).mkdir()
    assert latest_checkpoint(tmp_path) == checkpoint_dir(tmp_path, 5)


def test_rotation_keeps_the_newest_and_cleans_leftovers(tmp_path: Path) -> None:
    for i in range(5):
        newest = _commit(tmp_path, i)
    stale = AtomicCheckpoint(checkpoint_dir(tmp_path, 9))
    stale.prepare()  # an interrupted save's staging folder
    removed = rotate_checkpoints(tmp_path, 2, keep=newest)
    assert [p.name for p in removed] == ["checkpoint_0", "checkpoint_1", "checkpoint_2"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["checkpoint_3", "checkpoint_4"]
    assert rotate_checkpoints(tmp_path, None) == []
    with pytest.raises(ValueError):
        rotate_checkpoints(tmp_path, 0)


def test_rotation_never_removes_the_checkpoint_it_is_told_to_keep(tmp_path: Path) -> None:
    _legacy(tmp_path, 7)
    kept = _commit(tmp_path, 3)  # a user-chosen lower iteration than an old upstream folder
    rotate_checkpoints(tmp_path, 1, keep=kept)
    assert kept.exists() and not checkpoint_dir(tmp_path, 7).exists()


def _rotate_on_two_ranks(project: str) -> dict[str, object]:
    """Two ranks save with total_limit=2; the third save fails on rank 1 only, the fourth succeeds."""
    import torch

    import accelerate.checkpointing.training_state as training_state
    from accelerate import Accelerator
    from accelerate.checkpointing import CheckpointError
    from accelerate.utils import ProjectConfiguration

    config = ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(project_config=config)
    accelerator.prepare(torch.nn.Linear(2, 2))
    folders = lambda: sorted(p.name for p in (Path(project) / "checkpoints").iterdir())  # noqa: E731
    accelerator.save_state()
    accelerator.save_state()
    # Hidden names are staging folders: the other rank may already be staging the next save.
    after_two = [name for name in folders() if not name.startswith(".")]
    real_capture = training_state.capture_rng_state

    def failing_on_rank_one(*args, **kwargs):  # type: ignore[no-untyped-def]
        if accelerator.process_index == 1:
            raise OSError("disk vanished on rank 1")
        return real_capture(*args, **kwargs)

    training_state.capture_rng_state = failing_on_rank_one
    try:
        accelerator.save_state()
        error = "no error"
    except CheckpointError as exc:
        error = str(exc)
    finally:
        training_state.capture_rng_state = real_capture
    # Rank 0 may still be removing its staging folder right now.
    after_failure = [name for name in folders() if not name.startswith(".")]
    accelerator.save_state()
    accelerator.wait_for_everyone()
    return {"after_two": after_two, "error": error, "after_failure": after_failure, "after_retry": folders()}


def test_rotation_waits_for_every_rank_on_two_processes(tmp_path: Path, pool2) -> None:  # type: ignore[no-untyped-def]
    for result in pool2.run(_rotate_on_two_ranks, str(tmp_path)):
        assert result["after_two"] == ["checkpoint_0", "checkpoint_1"]
        assert "rank 1" in result["error"] and "disk vanished on rank 1" in result["error"]
        # Rank 0 wrote its part, but rank 1 failed: nothing committed, nothing rotated away.
        assert result["after_failure"] == ["checkpoint_0", "checkpoint_1"]
        assert result["after_retry"] == ["checkpoint_1", "checkpoint_2"]


def test_save_state_clears_folders_a_crash_left_beyond_the_limit_before_writing(tmp_path: Path) -> None:
    # A kill between a commit and its rotation leaves one folder too many; another such kill on the
    # next save would leave two. save_state removes the excess before it writes, so at most
    # total_limit committed checkpoints exist beside the one being written.
    import torch

    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    config = ProjectConfiguration(
        project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=None
    )
    accelerator = Accelerator(cpu=True, project_config=config)
    accelerator.prepare(torch.nn.Linear(2, 2))
    for _ in range(4):  # what four commits whose rotations were all killed leave behind
        accelerator.save_state()
    seen: list[list[str]] = []
    accelerator.register_save_state_pre_hook(
        lambda models, weights, output_dir: seen.append(
            sorted(p.name for p in (tmp_path / "checkpoints").glob("checkpoint_*"))
        )
    )
    config.total_limit = 2
    accelerator.save_state()
    assert seen == [["checkpoint_2", "checkpoint_3"]]
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("checkpoint_*")) == [
        "checkpoint_3",
        "checkpoint_4",
    ]
