"""Trackio tracker (needs `pip install trackio`)."""

from __future__ import annotations

from typing import Any

from accelerate.tracking.base import (
    GeneralTracker,
    is_media,
    loggable,
    on_main_process,
    require_tracker_package,
)

_ACCEPTED = "numbers (one-element tensors too), strings, dicts of those and trackio objects"


class TrackioTracker(GeneralTracker):
    """One ``trackio.init(project=run_name, **kwargs)`` run, stored locally unless ``space_id=`` is given."""

    name = "trackio"
    requires_logging_directory = False
    package = ("trackio", "trackio")

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__()
        require_tracker_package(self.name, *self.package)
        self.run_name = run_name
        self.init_kwargs = kwargs
        self.run: Any = None

    @on_main_process
    def start(self) -> None:
        import trackio

        self.run = trackio.init(project=self.run_name, **self.init_kwargs)

    @property
    def tracker(self) -> Any:
        return self.run

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        import trackio

        trackio.config.update(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.run.log(loggable(self.name, values, _ACCEPTED, keep=is_media, dicts="nest"), step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        self.run.finish()
