from __future__ import annotations

from typing import Any

import pytest

from accelerate import Accelerator
from accelerate.tracking import GeneralTracker


class ListTracker(GeneralTracker):
    name = "list"

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}
        self.logged: list[tuple[dict[str, Any], int | None]] = []
        self.finished = False

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.config = values

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.logged.append((values, step))

    def finish(self) -> None:
        self.finished = True


def test_custom_tracker_receives_config_logs_and_finish() -> None:
    tracker = ListTracker()
    accelerator = Accelerator(log_with=tracker)
    accelerator.init_trackers("run", config={"lr": 0.1})
    accelerator.log({"loss": 1.5}, step=3)
    assert accelerator.get_tracker("list") is tracker
    accelerator.end_training()
    assert tracker.config == {"lr": 0.1} and tracker.logged == [({"loss": 1.5}, 3)] and tracker.finished


def test_unknown_tracker_name_is_an_error() -> None:
    with pytest.raises(ValueError, match="not a known tracker"):
        Accelerator(log_with="nonexistent")


def test_missing_tracker_package_names_the_pip_command() -> None:
    from accelerate.utils.imports import is_package_available

    candidates = ("aim", "mlflow", "wandb", "tensorboard")  # aim is not in the test extra (README)
    missing = [name for name in candidates if not is_package_available(name)]
    if not missing:
        pytest.skip("every tracker package is installed here")
    with pytest.raises(ImportError, match=f"pip install {missing[0]}"):
        Accelerator(log_with=missing[0])


def test_no_trackers_means_log_is_a_no_op() -> None:
    accelerator = Accelerator()
    accelerator.init_trackers("run")
    accelerator.log({"loss": 1.0})
    with pytest.raises(ValueError, match="No tracker named 'wandb'"):
        accelerator.get_tracker("wandb")
