from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from accelerate import Accelerator
from accelerate.utils.imports import is_swanlab_available

pytestmark = pytest.mark.skipif(not is_swanlab_available(), reason="swanlab is not installed")


@pytest.fixture
def swanlab_env() -> Iterator[None]:
    # swanlab.init exports its settings (SWANLAB_MODE, SWANLAB_LOG_DIR, ...) to the process for good.
    before = set(os.environ)
    yield
    for name in set(os.environ) - before:
        if name.startswith("SWANLAB_"):
            del os.environ[name]


def _read_backup(run_dir: Path) -> tuple[str, list[tuple[str, int, float]]]:
    # SwanLab's own reader of an offline run (what `swanlab sync` parses before uploading).
    from swanlab.log.backup.datastore import DataStore
    from swanlab.log.backup.models import ModelsParser

    store = DataStore()
    store.open_for_scan(str(run_dir / "backup.swanlab"))
    with ModelsParser() as parser:
        for record in store:
            if record is not None:
                parser.parse_record(record)
    _, project, _, _, _, _, scalars, _, _ = parser.get_parsed()
    return project.name, [(s.key, s.step, s.metric["data"]) for s in scalars]


@pytest.mark.usefixtures("swanlab_env")
def test_swanlab_offline_run_holds_config_and_metrics(tmp_path: Path) -> None:
    accelerator = Accelerator(log_with="swanlab")
    accelerator.init_trackers(
        "proj",
        config={"lr": 0.1, "name": "x"},
        init_kwargs={"swanlab": {"mode": "offline", "logdir": str(tmp_path)}},
    )
    accelerator.log({"loss": torch.tensor(2.0), "split": {"val": torch.tensor([0.25])}}, step=1)
    accelerator.log({"loss": 1.5}, step=2)
    with pytest.raises(TypeError, match=r"cannot log 'vec': a Tensor of shape \(3,\)"):
        accelerator.log({"vec": torch.ones(3)}, step=3)
    accelerator.end_training()

    (run_dir,) = tmp_path.glob("run-*")
    project, scalars = _read_backup(run_dir)
    assert project == "proj"
    assert sorted(scalars) == [("loss", 1, 2.0), ("loss", 2, 1.5), ("split/val", 1, 0.25)]
    config = yaml.safe_load((run_dir / "files" / "config.yaml").read_text())
    assert config["lr"]["value"] == 0.1 and config["name"]["value"] == "x"
