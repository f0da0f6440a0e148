from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from accelerate.utils.imports import is_clearml_available
from tests.helpers.early import EarlyRun
from tests.helpers.side_by_side import BackgroundRun

pytestmark = pytest.mark.skipif(not is_clearml_available(), reason="clearml is not installed")
_ROOT = Path(__file__).resolve().parents[2]


def _train_and_log(folder_file: str) -> None:
    """Runs in a fresh interpreter: ClearML forks helper processes, and forking the test process (with
    the gloo pool's threads in it) can deadlock the child."""
    import faulthandler

    import torch

    # A stall in ClearML's shutdown prints every thread's stack and ends the run instead of waiting.
    faulthandler.dump_traceback_later(100, exit=True)

    from accelerate import Accelerator

    accelerator = Accelerator(log_with="clearml")
    # No framework hooks, stream capture or resource thread: only what the tracker itself reports.
    quiet = {
        "auto_connect_frameworks": False, "auto_connect_arg_parser": False, "auto_connect_streams": False,
        "auto_resource_monitoring": False,
    }  # fmt: skip
    accelerator.init_trackers("proj", config={"lr": 0.1, "name": "x"}, init_kwargs={"clearml": quiet})
    Path(folder_file).write_text(
        str(accelerator.get_tracker("clearml", unwrap=True).get_offline_mode_folder())
    )
    accelerator.log({"train_loss": torch.tensor(2.0), "acc": 0.5, "d": {"a": torch.tensor([3.0])}}, step=1)
    accelerator.log({"train_loss": 1.5, "eval_loss": 1.75}, step=2)
    accelerator.log({"final": 0.9})
    try:
        accelerator.log({"vec": torch.ones(3)}, step=3)
    except TypeError as exc:
        assert "cannot log 'vec': a Tensor of shape (3,)" in str(exc), exc
    else:
        raise AssertionError("a 3-element tensor was logged")
    accelerator.end_training()


def _start_offline_session(folder: Path) -> BackgroundRun:
    # Offline, with the session under `folder` (ClearML keeps it in ~/.clearml/cache/offline), and with
    # ClearML's default (Linux) set-up: reporting from a forked process, repository detection on. That
    # fork used to race `git status` in the detection thread and stall the close in about 1 run of 4.
    # ClearML's close then waits ~10 s for that process with the cores idle: the run starts with the
    # session (tests/helpers/early.py).
    env = {**os.environ, "CLEARML_OFFLINE_MODE": "1", "HOME": str(folder)}
    code = (
        f"from tests.tracking.test_clearml import _train_and_log; _train_and_log({str(folder / 'folder')!r})"
    )
    return BackgroundRun(
        [sys.executable, "-c", code], folder=folder / "logs", env=env, timeout=150, cwd=_ROOT
    )


@pytest.mark.early(start=_start_offline_session)
def test_clearml_offline_session_holds_configuration_and_scalars(early_run: EarlyRun) -> None:
    result = early_run.result()
    assert result.returncode == 0, result.stderr
    home = early_run.folder

    # Read back the zip ClearML writes at close (what `Task.import_offline_session` takes), unpacked with
    # ClearML's own extractor, the first step of that importer.
    from clearml.storage.archive import extract_zip_archive

    session = Path((home / "folder").read_text())
    folder = home / "unpacked"
    extract_zip_archive(archive_path=str(session.with_suffix(".zip")), target=str(folder))
    events = [
        event for line in (folder / "metrics.jsonl").read_text().splitlines() for event in json.loads(line)
    ]
    scalars = [
        (e["metric"], e["variant"], e["value"], e["iter"])
        for e in events
        if e.get("type") == "training_stats_scalar"
    ]
    assert scalars[:5] == [
        ("loss", "train", 2.0, 1), ("acc", "train", 0.5, 1), ("d/a", "train", 3.0, 1),
        ("loss", "train", 1.5, 2), ("loss", "eval", 1.75, 2),
    ]  # fmt: skip
    assert ("Summary", "final", 0.9) in [row[:3] for row in scalars]  # a value without a step
    task = json.loads((folder / "task.json").read_text())
    assert task["project_name"] == "proj" and task["name"] == "proj"
    assert task["configuration"]["General"]["value"].split("\n") == ["lr = 0.1", 'name = "x"']
    # Repository detection (now inside Task.init) still ran and recorded the script's requirements.
    assert "clearml ==" in task["script"]["requirements"]["pip"]
