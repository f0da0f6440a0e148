"""Which process runs which tracker, on two real gloo processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accelerate import Accelerator, PartialState
from accelerate.tracking import GeneralTracker
from accelerate.utils.imports import is_tensorboard_available
from tests.helpers.pool import WorkerPool


class FileTracker(GeneralTracker):
    """Appends every call to ``<directory>/<name>-rank<N>.jsonl``: a real tracker with a readable store."""

    name = "file"

    def __init__(self, directory: str) -> None:
        super().__init__()
        self.directory = Path(directory)

    def _write(self, event: str, payload: Any) -> None:
        rank = PartialState().process_index
        with open(self.directory / f"{self.name}-rank{rank}.jsonl", "a") as out:
            out.write(json.dumps([event, payload]) + "\n")

    def start(self) -> None:
        self._write("start", None)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self._write("log", [values, step])

    def finish(self) -> None:
        self._write("finish", None)


class EveryRankTracker(FileTracker):
    name = "every_rank"
    main_process_only = False


def _train_with_trackers(directory: str) -> list[str]:
    accelerator = Accelerator(log_with=[FileTracker(directory), EveryRankTracker(directory)])
    accelerator.init_trackers("run")
    accelerator.log({"loss": 1.0}, step=1)
    # Every rank can write the same line: a rank that does not run the tracker gets a do-nothing one.
    accelerator.get_tracker("file").log({"extra": 2.0}, step=1)
    held = [tracker.name for tracker in accelerator.trackers]
    accelerator.end_training()
    return held


def test_main_process_only_trackers_run_once_and_the_others_on_every_rank(
    pool2: WorkerPool, tmp_path: Path
) -> None:
    held = pool2.run(_train_with_trackers, str(tmp_path))
    assert held == [["file", "every_rank"], ["every_rank"]]
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "every_rank-rank0.jsonl", "every_rank-rank1.jsonl", "file-rank0.jsonl",
    ]  # fmt: skip
    lines = (tmp_path / "file-rank0.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        ["start", None], ["log", [{"loss": 1.0}, 1]], ["log", [{"extra": 2.0}, 1]], ["finish", None],
    ]  # fmt: skip


def _tensorboard_on_two_ranks(directory: str) -> str:
    accelerator = Accelerator(log_with="tensorboard", project_dir=directory)
    accelerator.init_trackers("run")
    accelerator.log({"loss": 1.0}, step=1)
    tracker = accelerator.get_tracker("tensorboard")
    accelerator.end_training()
    return type(tracker).__name__


@pytest.mark.skipif(not is_tensorboard_available(), reason="tensorboard is not installed")
def test_tensorboard_writes_from_the_main_process_only(pool2: WorkerPool, tmp_path: Path) -> None:
    assert pool2.run(_tensorboard_on_two_ranks, str(tmp_path)) == ["TensorBoardTracker", "GeneralTracker"]
    assert len(list((tmp_path / "run").glob("events.out.tfevents.*"))) == 1
