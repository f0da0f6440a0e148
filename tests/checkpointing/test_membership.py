"""The line a resumed process 0 prints: checkpoint, world sizes, steps replayed, the batch rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelerate.checkpointing import membership
from accelerate.diagnostics.watchdog import SLOT
from accelerate.state.gradient import GradientState, adjusted_for_world_size
from accelerate.utils import GradientAccumulationPlugin


def test_progress_left_by_the_previous_group_gives_the_steps_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = tmp_path / "checkpoints" / "checkpoint_1"
    checkpoint.mkdir(parents=True)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "1")
    monkeypatch.setattr(SLOT, "step", 7)
    record = membership.ProgressRecord()
    record.note_checkpoint(checkpoint)
    membership.record_progress()  # what a failing process of the previous group leaves
    line = record.resume_line(checkpoint, saved_world=2, world=1, saved_steps=4)
    assert "(saved by 2 processes at optimizer step 4) on 1 process; 3 optimizer step(s) replayed" in line
    assert "the global batch is 1/2 of the checkpoint's" in line
    assert not list(checkpoint.parent.glob(".accelerate-progress-*"))  # read once
    again = record.resume_line(checkpoint, saved_world=1, world=1, saved_steps=4)
    assert "replayed since it: unknown" in again and "global batch" not in again


def test_the_line_says_when_accumulation_keeps_the_global_batch(tmp_path: Path) -> None:
    plugin = GradientAccumulationPlugin(num_steps=1, adjust_for_world_size=True, reference_world_size=2)
    GradientState(adjusted_for_world_size(plugin, 1))
    line = membership.ProgressRecord().resume_line(
        tmp_path / "checkpoint_0", saved_world=2, world=1, saved_steps=0
    )
    assert "gradient accumulation is 2 micro-steps at this size (the global batch is kept)" in line


def test_an_abnormal_end_writes_the_record_of_the_accelerator_that_saved_or_loaded_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "1")
    monkeypatch.setattr(SLOT, "step", 3)
    monkeypatch.setattr(membership, "_active", None)
    membership.record_progress()  # nothing saved or loaded yet: nothing to write, nowhere
    first, second = membership.ProgressRecord(), membership.ProgressRecord()
    first.note_checkpoint(tmp_path / "a" / "checkpoint_0")
    second.note_checkpoint(tmp_path / "b" / "checkpoint_0")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    membership.record_progress()
    assert [p.parent.name for p in tmp_path.glob("*/.accelerate-progress-*")] == ["b"]
    first.note_checkpoint(tmp_path / "a" / "checkpoint_1")
    membership.record_progress()
    assert sorted(p.parent.name for p in tmp_path.glob("*/.accelerate-progress-*")) == ["a", "b"]


def test_each_accelerator_keeps_its_own_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate import Accelerator

    monkeypatch.setattr(membership, "_active", None)  # restored afterwards: no record leaks out

    accelerator = Accelerator(cpu=True)
    record = accelerator._progress_record()
    assert record is accelerator._progress_record() and record.checkpoints_dir is None
    accelerator.save_state(str(tmp_path / "ckpt"))
    assert record.checkpoints_dir == tmp_path.resolve() and membership._active is record
