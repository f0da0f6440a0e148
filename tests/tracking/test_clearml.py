from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from accelerate import Accelerator
from accelerate.utils.imports import is_clearml_available

pytestmark = pytest.mark.skipif(not is_clearml_available(), reason="clearml is not installed")


@pytest.fixture
def clearml_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("CLEARML_OFFLINE_MODE", "1")
    monkeypatch.setenv("HOME", str(tmp_path))  # the offline session lands in ~/.clearml/cache/offline
    yield
    for name in ("CLEARML_PROC_MASTER_ID", "TRAINS_PROC_MASTER_ID"):  # ClearML marks the process it ran in
        os.environ.pop(name, None)


def test_clearml_offline_session_holds_configuration_and_scalars(clearml_offline: None) -> None:
    accelerator = Accelerator(log_with="clearml")
    # No framework hooks, stream capture or resource thread: they would patch the test process itself.
    quiet = {
        "auto_connect_frameworks": False, "auto_connect_arg_parser": False, "auto_connect_streams": False,
        "auto_resource_monitoring": False,
    }  # fmt: skip
    accelerator.init_trackers("proj", config={"lr": 0.1, "name": "x"}, init_kwargs={"clearml": quiet})
    folder = Path(accelerator.get_tracker("clearml", unwrap=True).get_offline_mode_folder())
    accelerator.log({"train_loss": torch.tensor(2.0), "acc": 0.5, "d": {"a": torch.tensor([3.0])}}, step=1)
    accelerator.log({"train_loss": 1.5, "eval_loss": 1.75}, step=2)
    accelerator.log({"final": 0.9})
    with pytest.raises(TypeError, match=r"cannot log 'vec': a Tensor of shape \(3,\)"):
        accelerator.log({"vec": torch.ones(3)}, step=3)
    accelerator.end_training()

    events = [event for line in (folder / "metrics.jsonl").read_text().splitlines() for event in json.loads(line)]
    scalars = [(e["metric"], e["variant"], e["value"], e["iter"]) for e in events if e.get("type") == "training_stats_scalar"]
    assert scalars[:5] == [
        ("loss", "train", 2.0, 1), ("acc", "acc", 0.5, 1), ("d/a", "d/a", 3.0, 1),
        ("loss", "train", 1.5, 2), ("loss", "eval", 1.75, 2),
    ]  # fmt: skip
    assert ("Summary", "final", 0.9) in [row[:3] for row in scalars]  # a value without a step
    task = json.loads((folder / "task.json").read_text())
    assert task["project_name"] == "proj" and task["name"] == "proj"
    assert task["configuration"]["General"]["value"].split("\n") == ["lr = 0.1", 'name = "x"']
