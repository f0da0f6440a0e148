"""DVCLive tracker (needs `pip install dvclive`)."""

from __future__ import annotations

from typing import Any

from accelerate.tracking.base import GeneralTracker, loggable, on_main_process, require_tracker_package

_ACCEPTED = "numbers (one-element tensors too), strings and dicts of those (logged as 'outer/inner')"


class DVCLiveTracker(GeneralTracker):
    """Logs with a ``dvclive.Live`` (yours via ``live=``, else ``Live(**kwargs)``). ``run_name`` is unused:
    DVCLive names experiments itself."""

    name = "dvclive"
    requires_logging_directory = False
    package = ("dvclive", "dvclive")

    def __init__(self, run_name: str | None = None, live: Any = None, **kwargs: Any) -> None:
        super().__init__()
        require_tracker_package(self.name, *self.package)
        self.run_name = run_name
        self.live = live
        self.init_kwargs = kwargs

    @on_main_process
    def start(self) -> None:
        if self.live is None:
            from dvclive.live import Live

            self.live = Live(**self.init_kwargs)

    @property
    def tracker(self) -> Any:
        return self.live

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.live.log_params(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        if step is not None:
            self.live.step = step
        # DVCLive records strings as metrics too (in the summary and the step's row), as upstream passes them.
        prepared = loggable(self.name, values, _ACCEPTED, keep=lambda v: isinstance(v, str), dicts="flatten")
        for key, value in prepared.items():
            self.live.log_metric(key, value, **kwargs)
        # One call is one step: DVCLive writes the step's row and moves on.
        self.live.next_step()

    @on_main_process
    def finish(self) -> None:
        self.live.end()
