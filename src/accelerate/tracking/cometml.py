"""Comet tracker (needs `pip install comet_ml`)."""

from __future__ import annotations

from typing import Any

from accelerate.tracking.base import GeneralTracker, loggable, on_main_process, require_tracker_package

_ACCEPTED = "numbers (one-element tensors too), strings (as 'other' fields) and dicts of numbers"


class CometMLTracker(GeneralTracker):
    """One Comet experiment from ``comet_ml.start(project_name=run_name, **kwargs)``; Comet reads its API
    key and workspace from its own config or environment (``COMET_API_KEY``...)."""

    name = "comet_ml"
    requires_logging_directory = False
    package = ("comet_ml", "comet_ml")

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__()
        require_tracker_package(self.name, *self.package)
        self.run_name = run_name
        self.init_kwargs = kwargs
        self.writer: Any = None

    @on_main_process
    def start(self) -> None:
        import comet_ml

        self.writer = comet_ml.start(project_name=self.run_name, **self.init_kwargs)

    @property
    def tracker(self) -> Any:
        return self.writer

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.writer.log_parameters(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        if step is not None:
            self.writer.set_step(step)
        keep_text = lambda value: isinstance(value, str)  # noqa: E731
        for key, value in loggable(self.name, values, _ACCEPTED, keep=keep_text, dicts="nest").items():
            if isinstance(value, str):
                self.writer.log_other(key, value, **kwargs)
            elif isinstance(value, dict):
                numbers = {sub: item for sub, item in value.items() if isinstance(item, int | float)}
                self.writer.log_metrics(numbers, step=step, prefix=key, **kwargs)
            else:
                self.writer.log_metric(key, value, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        self.writer.end()
