from __future__ import annotations

from typing import Any

import pytest

from accelerate import Accelerator
from accelerate.tracking import GeneralTracker
from accelerate.utils.imports import is_tensorboard_available


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

    missing = [name for name in ("mlflow", "wandb", "tensorboard") if not is_package_available(name)]
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


def _read_scalars(logdir: str) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(logdir)
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


@pytest.mark.skipif(not is_tensorboard_available(), reason="tensorboard is not installed")
def test_tensorboard_writes_what_was_logged_tensors_included(tmp_path: Any) -> None:
    import torch

    accelerator = Accelerator(log_with="tensorboard", project_dir=str(tmp_path))
    accelerator.init_trackers("run", config={"lr": 0.1, "name": "x"})
    accelerator.log({"loss": torch.tensor(2.0), "acc": 0.5, "steps": 3}, step=1)
    accelerator.log({"loss": torch.tensor([1.5]), "acc": np_scalar(0.75)}, step=2)
    with pytest.raises(TypeError, match=r"cannot log 'vec': a Tensor of shape \(3,\).*mean\(\)\.item\(\)"):
        accelerator.log({"vec": torch.ones(3)}, step=3)
    accelerator.end_training()
    scalars = _read_scalars(str(tmp_path / "run"))
    assert scalars["loss"] == [(1, 2.0), (2, 1.5)]
    assert scalars["acc"] == [(1, 0.5), (2, 0.75)]
    assert scalars["steps"] == [(1, 3.0)]


def np_scalar(value: float) -> Any:
    import numpy as np

    return np.float32(value)


def test_log_values_become_numbers() -> None:
    import torch

    from accelerate.tracking.base import as_number

    assert as_number(torch.tensor(2.5)) == 2.5 and as_number(torch.tensor([3])) == 3
    assert as_number(True) is True and as_number(7) == 7
    assert as_number(torch.ones(2)) is None and as_number("text") is None and as_number([1.0]) is None
