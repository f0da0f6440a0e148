"""Experiment trackers: one module per backend, each importing its package only when a run starts."""

from __future__ import annotations

from accelerate.tracking.aim import AimTracker
from accelerate.tracking.base import GeneralTracker, on_main_process
from accelerate.tracking.clearml import ClearMLTracker
from accelerate.tracking.cometml import CometMLTracker
from accelerate.tracking.dvclive import DVCLiveTracker
from accelerate.tracking.logger_type import LoggerType
from accelerate.tracking.mlflow import MLflowTracker
from accelerate.tracking.registry import (
    LOGGER_TYPE_TO_CLASS,
    check_trackers,
    filter_trackers,
    find_tracker,
    get_available_trackers,
    register_tracker_class,
    start_trackers,
)
from accelerate.tracking.swanlab import SwanLabTracker
from accelerate.tracking.tensorboard import TensorBoardTracker
from accelerate.tracking.trackio import TrackioTracker
from accelerate.tracking.wandb import WandBTracker

__all__ = [
    "LOGGER_TYPE_TO_CLASS",
    "AimTracker",
    "ClearMLTracker",
    "CometMLTracker",
    "DVCLiveTracker",
    "GeneralTracker",
    "LoggerType",
    "MLflowTracker",
    "SwanLabTracker",
    "TensorBoardTracker",
    "TrackioTracker",
    "WandBTracker",
    "check_trackers",
    "filter_trackers",
    "find_tracker",
    "get_available_trackers",
    "on_main_process",
    "register_tracker_class",
    "start_trackers",
]
