from __future__ import annotations

import pytest

from accelerate.tracking import LOGGER_TYPE_TO_CLASS, LoggerType


def test_members_match_upstream_names() -> None:
    assert LoggerType.list() == [
        "all", "aim", "tensorboard", "wandb", "comet_ml", "mlflow", "clearml", "dvclive", "swanlab", "trackio",
    ]  # fmt: skip
    # Every member but ALL names a tracker class, and the other way round.
    assert sorted(LOGGER_TYPE_TO_CLASS) == sorted(set(LoggerType.list()) - {"all"})


def test_members_are_strings_and_accept_any_case() -> None:
    assert (
        LoggerType.WANDB == "wandb"
        and str(LoggerType.COMETML) == "comet_ml"
        and f"{LoggerType.MLFLOW}" == "mlflow"
    )
    assert LoggerType("TensorBoard") is LoggerType.TENSORBOARD
    assert "dvclive" in LoggerType and LoggerType.AIM in LoggerType and "nonsense" not in LoggerType
    with pytest.raises(ValueError):
        LoggerType("nonsense")


def test_upstream_paths_reexport_the_same_enum() -> None:
    import accelerate.tracking
    import accelerate.utils

    assert accelerate.utils.LoggerType is LoggerType is accelerate.tracking.LoggerType
