from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch

from accelerate import Accelerator
from accelerate.utils.imports import is_comet_ml_available

pytestmark = pytest.mark.skipif(not is_comet_ml_available(), reason="comet_ml is not installed")


def _messages(archive: Path) -> list[dict[str, Any]]:
    with zipfile.ZipFile(archive) as bundle:
        return [json.loads(line) for line in bundle.read("messages.json").decode().splitlines() if line]


def test_comet_offline_archive_holds_parameters_metrics_and_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMET_OFFLINE_DIRECTORY", str(tmp_path))
    monkeypatch.setenv("COMET_DISABLE_AUTO_LOGGING", "1")
    monkeypatch.setenv("COMET_CONFIG", str(tmp_path / ".comet.config"))  # not the user's own config
    accelerator = Accelerator(log_with="comet_ml")
    accelerator.init_trackers(
        "proj", config={"lr": 0.1, "name": "x"}, init_kwargs={"comet_ml": {"online": False}}
    )
    accelerator.log(
        {"loss": torch.tensor(2.0), "acc": 0.5, "d": {"a": torch.tensor([3.0])}, "s": "txt"}, step=1
    )
    accelerator.log({"loss": 1.5}, step=2)
    with pytest.raises(TypeError, match=r"cannot log 'vec': a Tensor of shape \(3,\)"):
        accelerator.log({"vec": torch.ones(3)}, step=3)
    accelerator.end_training()

    (archive,) = tmp_path.glob("*.zip")
    messages = _messages(archive)
    metrics = [
        (
            m["payload"]["metric"]["metricName"],
            m["payload"]["metric"]["metricValue"],
            m["payload"]["metric"]["step"],
        )
        for m in messages
        if m["type"] == "metric_msg" and not m["payload"]["metric"]["metricName"].startswith("sys.")
    ]
    assert [metric for metric in metrics if metric[0] in ("loss", "acc", "d_a")] == [
        ("loss", 2.0, 1), ("acc", 0.5, 1), ("d_a", 3.0, 1), ("loss", 1.5, 2),
    ]  # fmt: skip
    params = {m["payload"]["param"]["paramName"]: m["payload"]["param"]["paramValue"] for m in messages
              if m["type"] == "parameter_msg"}  # fmt: skip
    assert params["lr"] == 0.1 and params["name"] == "x"
    others = {m["payload"]["key"]: m["payload"]["value"] for m in messages if m["type"] == "log_other"}
    assert others["s"] == "txt"
