from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import torch

from accelerate import Accelerator
from accelerate.utils.imports import is_trackio_available

pytestmark = pytest.mark.skipif(not is_trackio_available(), reason="trackio is not installed")


def test_trackio_local_database_holds_config_and_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path))
    accelerator = Accelerator(log_with="trackio")
    accelerator.init_trackers("proj", config={"lr": 0.1, "name": "x"})
    accelerator.log(
        {"loss": torch.tensor(2.0), "acc": 0.5, "d": {"a": torch.tensor([3.0])}, "s": "txt"}, step=1
    )
    accelerator.log({"loss": 1.5}, step=2)
    with pytest.raises(TypeError, match=r"cannot log 'd/vec': a Tensor of shape \(3,\)"):
        accelerator.log({"d": {"vec": torch.ones(3)}}, step=3)
    accelerator.end_training()

    with sqlite3.connect(tmp_path / "proj.db") as db:
        rows = [
            (step, json.loads(metrics)) for step, metrics in db.execute("SELECT step, metrics FROM metrics")
        ]
        (config,) = [json.loads(row[0]) for row in db.execute("SELECT config FROM configs")]
    assert rows == [(1, {"loss": 2.0, "acc": 0.5, "d": {"a": 3.0}, "s": "txt"}), (2, {"loss": 1.5})]
    assert config["lr"] == 0.1 and config["name"] == "x"
