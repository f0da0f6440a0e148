from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from accelerate import Accelerator
from accelerate.utils.imports import is_dvclive_available

pytestmark = pytest.mark.skipif(not is_dvclive_available(), reason="dvclive is not installed")


def test_dvclive_writes_params_metrics_and_per_step_plots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # DVCLive writes its dvc.yaml in the working directory
    out = tmp_path / "live"
    accelerator = Accelerator(log_with="dvclive")
    accelerator.init_trackers(
        "proj",
        config={"lr": 0.1, "name": "x"},
        init_kwargs={"dvclive": {"dir": str(out), "save_dvc_exp": False}},
    )
    accelerator.log({"loss": torch.tensor(2.0), "acc": 0.5, "d": {"a": torch.tensor([3.0])}}, step=1)
    accelerator.log({"loss": 1.5}, step=2)
    with pytest.raises(TypeError, match=r"cannot log 'vec': a Tensor of shape \(3,\)"):
        accelerator.log({"vec": torch.ones(3)}, step=3)
    accelerator.end_training()

    assert json.loads((out / "metrics.json").read_text()) == {
        "loss": 1.5,
        "acc": 0.5,
        "d": {"a": 3.0},
        "step": 2,
    }
    assert (out / "params.yaml").read_text().split() == ["lr:", "0.1", "name:", "x"]
    assert (out / "plots/metrics/loss.tsv").read_text().split() == ["step", "loss", "1", "2.0", "2", "1.5"]
    assert (out / "plots/metrics/d/a.tsv").read_text().split() == ["step", "a", "1", "3.0"]


def test_dvclive_records_strings_and_counts_steps_without_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As upstream's users drive it: strings are metrics too; a log without a step is the next step.
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "live"
    accelerator = Accelerator(log_with="dvclive", project_dir=str(tmp_path))
    accelerator.init_trackers(
        "p", init_kwargs={"dvclive": {"dir": str(out), "save_dvc_exp": False, "dvcyaml": None}}
    )
    values = {"total_loss": 0.1, "iteration": 1, "my_text": "some_value"}
    accelerator.log(values)
    accelerator.log(values)
    accelerator.log(values, step=3)
    accelerator.end_training()
    assert json.loads((out / "metrics.json").read_text()) == {**values, "step": 3}
    for key in values:
        rows = (out / "plots" / "metrics" / f"{key}.tsv").read_text().split("\n")[1:]
        assert [row.split("\t")[0] for row in rows if row] == ["0", "1", "3"]
