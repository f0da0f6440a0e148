"""Trackio tracker (needs `pip install trackio`)."""

from __future__ import annotations

from typing import Any

from accelerate.tracking.base import (
    ProjectRunTracker,
    is_media,
    loggable,
    on_main_process,
)

_ACCEPTED = "numbers (one-element tensors too), strings, dicts of those and trackio objects"


class TrackioTracker(ProjectRunTracker):
    """One ``trackio.init(project=run_name, **kwargs)`` run, stored locally unless ``space_id=`` is given."""

    name = "trackio"
    requires_logging_directory = False
    package = ("trackio", "trackio")

    allow_val_change = False

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.run.log(loggable(self.name, values, _ACCEPTED, keep=is_media, dicts="nest"), step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        self.run.finish()
