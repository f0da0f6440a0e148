from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration
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
    assert (run_dir / "params" / "lr").read_text() == "0.1" and (
        run_dir / "params" / "name"
    ).read_text() == "x"
    assert (run_dir / "tags" / "mlflow.runName").read_text() == "first"
    assert "cannot log 'note': a str" in caplog.text  # mlflow records numbers only: skipped, with a warning
    assert str(tmp_path / "artifacts") in (run_dir.parent / "meta.yaml").read_text()


@pytest.mark.skipif(
    importlib.util.find_spec("sqlalchemy") is None or importlib.util.find_spec("alembic") is None,
    reason="MLflow's sqlite store needs sqlalchemy and alembic",
)
def test_mlflow_without_tracking_uri_writes_a_sqlite_store_in_the_logging_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)  # MLflow's own default would write ./mlflow.db here: it must not
    logs = tmp_path / "project" / "logs"
    accelerator = Accelerator(
        log_with="mlflow",
        project_config=ProjectConfiguration(project_dir=str(tmp_path / "project"), logging_dir=str(logs)),
    )
    accelerator.init_trackers("exp", config={"lr": 0.1})
    run_id = accelerator.get_tracker("mlflow", unwrap=True).info.run_id
    accelerator.log({"loss": 2.0}, step=1)
    accelerator.log({"loss": 1.5}, step=2)
    accelerator.end_training()

    # The store is left as it was found: no URI exported to this process or its children.
    assert not mlflow.is_tracking_uri_set() and "MLFLOW_TRACKING_URI" not in os.environ
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()
    client = mlflow.MlflowClient(f"sqlite:///{logs / 'mlflow.db'}")
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")] == [(1, 2.0), (2, 1.5)]
    assert client.get_run(run_id).data.params == {"lr": "0.1"}
    assert client.get_experiment_by_name("exp").artifact_location.endswith(str(logs))


def test_mlflow_log_takes_extra_keywords_no_step_and_artifacts_and_leaves_the_config_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    config = {"lr": 0.1, "long": "x" * 7000, "nested": {"a": 1}}
    given = {**config, "nested": dict(config["nested"])}  # type: ignore[dict-item]
    accelerator = Accelerator(log_with="mlflow")
    accelerator.init_trackers("exp", config=config)
    assert config == given  # the too-long value is skipped, not deleted from the caller's dict
    tracker = accelerator.get_tracker("mlflow")
    run_id = tracker.tracker.info.run_id
    # Keywords for mlflow.log_metrics travel through log_kwargs, as upstream forwards them.
    accelerator.log({"loss": 2.0}, step=1, log_kwargs={"mlflow": {"synchronous": True}})
    accelerator.log({"loss": 1.0})  # no step: MLflow records step 0
    with pytest.raises(TypeError, match="unexpected keyword argument 'not_an_mlflow_argument'"):
        accelerator.log({"loss": 1.0}, log_kwargs={"mlflow": {"not_an_mlflow_argument": 1}})
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.txt").write_text("a")
    tracker.log_artifact(str(tmp_path / "notes.txt"))
    tracker.log_artifacts(str(tmp_path / "folder"), artifact_path="more")
    accelerator.end_training()

    (run_dir,) = store.glob(f"*/{run_id}")
    assert _read_metric(run_dir, "loss") == [(1, 2.0), (0, 1.0)]
    assert (run_dir / "params" / "lr").read_text() == "0.1" and not (run_dir / "params" / "long").exists()
    artifacts = run_dir / "artifacts"
    assert (artifacts / "notes.txt").read_text() == "hello" and (
        artifacts / "more" / "a.txt"
    ).read_text() == "a"
