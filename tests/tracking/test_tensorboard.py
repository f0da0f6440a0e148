from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from accelerate import Accelerator
from accelerate.tracking import LoggerType
from accelerate.utils import ProjectConfiguration
from accelerate.utils.imports import is_tensorboard_available

pytestmark = pytest.mark.skipif(not is_tensorboard_available(), reason="tensorboard is not installed")


def _events(logdir: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"images": 0, "tensors": 0})
    events.Reload()
    return events


def _scalars(events: Any) -> dict[str, list[tuple[int, float]]]:
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_writes_what_was_logged_tensors_included(tmp_path: Path) -> None:
    import numpy as np

    accelerator = Accelerator(log_with=LoggerType.TENSORBOARD, project_dir=str(tmp_path))
    accelerator.init_trackers("run", config={"lr": 0.1, "name": "x"})
    accelerator.log({"loss": torch.tensor(2.0), "acc": 0.5, "steps": 3, "note": "hello"}, step=1)
    accelerator.log(
        {"loss": torch.tensor([1.5]), "acc": np.float32(0.75), "split": {"a": torch.tensor(1.0)}}, step=2
    )
    with pytest.raises(TypeError, match=r"cannot log 'vec': a Tensor of shape \(3,\).*mean\(\)\.item\(\)"):
        accelerator.log({"vec": torch.ones(3)}, step=3)
    accelerator.get_tracker("tensorboard").log_images({"pics": torch.zeros(2, 3, 4, 4)}, step=2)
    accelerator.end_training()

    events = _events(tmp_path / "run")
    scalars = _scalars(events)
    assert scalars["loss"] == [(1, 2.0), (2, 1.5)]
    assert scalars["acc"] == [(1, 0.5), (2, 0.75)]
    assert scalars["steps"] == [(1, 3.0)]
    (note,) = events.Tensors("note/text_summary")
    assert note.step == 1 and note.tensor_proto.string_val == [b"hello"]
    # add_images tiles the batch of two 4x4 images into one 8x4 grid.
    assert [(image.step, image.width, image.height) for image in events.Images("pics")] == [(2, 8, 4)]
    # add_scalars writes each dict entry to its own sub-run directory.
    assert _scalars(_events(next((tmp_path / "run").glob("split_a*"))))["split"] == [(2, 1.0)]


def test_tensorboard_without_a_logging_directory_says_how_to_set_one(tmp_path: Path) -> None:
    # As upstream: the Accelerator refuses at once, in upstream's words, and says how to give one.
    with pytest.raises(
        ValueError,
        match=r"Logging with `tensorboard` requires a `logging_dir`.*Accelerator\(project_dir=\.\.\.\)",
    ):
        Accelerator(log_with="tensorboard")
    Accelerator(log_with="tensorboard", project_dir=str(tmp_path))
    Accelerator(
        log_with="tensorboard", project_config=ProjectConfiguration(project_dir=str(tmp_path), total_limit=3)
    )
