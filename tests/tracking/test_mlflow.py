from __future__ import annotations

from pathlib import Path

import pytest
import torch

from accelerate import Accelerator
from accelerate.utils.imports import is_mlflow_available

pytestmark = pytest.mark.skipif(not is_mlflow_available(), reason="mlflow is not installed")


def _read_metric(run_dir: Path, key: str) -> list[tuple[int, float]]:
    # The file store keeps one "timestamp value step" line per logged value.
    lines = (run_dir / "metrics" / key).read_text().split("\n")
    return [(int(step), float(value)) for _, value, step in (line.split() for line in lines if line)]


def test_mlflow_writes_params_and_metrics_to_its_file_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 otherwise wants a database
    accelerator = Accelerator(log_with="mlflow")
    accelerator.init_trackers(
        "exp",
        config={"lr": 0.1, "name": "x"},
        init_kwargs={"mlflow": {"run_name": "first", "logging_dir": str(tmp_path / "artifacts")}},
    )
    run_id = accelerator.get_tracker("mlflow", unwrap=True).info.run_id
    accelerator.log({"loss": torch.tensor(2.0), "acc": 0.5, "split": {"val": torch.tensor([0.25])}}, step=1)
    accelerator.log({"loss": 1.5, "note": "text"}, step=2)
    with pytest.raises(TypeError, match=r"cannot log 'vec': a Tensor of shape \(3,\)"):
        accelerator.log({"vec": torch.ones(3)}, step=3)
    accelerator.end_training()

    (run_dir,) = store.glob(f"*/{run_id}")
    assert _read_metric(run_dir, "loss") == [(1, 2.0), (2, 1.5)]
    assert _read_metric(run_dir, "acc") == [(1, 0.5)]
    assert _read_metric(run_dir, "split/val") == [(1, 0.25)]
    assert (run_dir / "params" / "lr").read_text() == "0.1" and (run_dir / "params" / "name").read_text() == "x"
    assert (run_dir / "tags" / "mlflow.runName").read_text() == "first"
    assert "cannot log 'note': a str" in caplog.text  # mlflow records numbers only: skipped, with a warning
    assert str(tmp_path / "artifacts") in (run_dir.parent / "meta.yaml").read_text()
