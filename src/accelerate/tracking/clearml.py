"""ClearML tracker (needs `pip install clearml`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from accelerate.tracking.base import GeneralTracker, loggable, on_main_process, require_tracker_package

_ACCEPTED = "numbers (one-element tensors too) and dicts of numbers (logged as 'outer/inner')"


def _title_and_series(key: str) -> tuple[str, str]:
    # `eval_loss` and `train_loss` become the series "eval" and "train" of one "loss" plot; a key
    # without a split prefix is a training series (as upstream reports it).
    for split in ("eval", "test", "train"):
        if key.startswith(f"{split}_"):
            return key[len(split) + 1 :], split
    return key, "train"


# ClearML's switch for running repository detection in a thread (config
# `sdk.development.vcs_repo_detect_async`), as its `Task` class holds it.
_ASYNC_REPO_DETECTION = "_Task__detect_repo_async"


@contextmanager
def _repository_detection_in_init(task_class: Any) -> Iterator[None]:
    """Makes ``Task.init`` detect the repository before it returns instead of in a thread.

    Why: on Linux ``Task.init`` starts repository detection in a thread (which runs ``git status`` through
    ``subprocess``) and then ``os.fork()``s its reporting process. A fork that lands while that thread is
    inside ``Popen`` copies the pipe ``Popen`` waits on for the ``exec``; the reporter keeps it open until the
    task closes, and ``Task.close`` first waits (up to 300 s) for the detection thread, which never sees the
    pipe's end: ``end_training`` stalls for five minutes (seen in 2 of 8 offline runs here). Detected before
    the fork, nothing is shared and the task records the same repository and requirements."""
    previous = task_class.__dict__.get(_ASYNC_REPO_DETECTION)
    if previous is None:  # another ClearML layout: leave it as it is
        yield
        return
    setattr(task_class, _ASYNC_REPO_DETECTION, False)
    try:
        yield
    finally:
        setattr(task_class, _ASYNC_REPO_DETECTION, previous)


class ClearMLTracker(GeneralTracker):
    """Reports to the running ClearML task, or to a new ``Task.init(**kwargs)`` whose project and task
    name default to ``CLEARML_PROJECT`` / ``CLEARML_TASK`` or ``run_name``."""

    name = "clearml"
    requires_logging_directory = False
    package = ("clearml", "clearml")

    def __init__(self, run_name: str | None = None, **kwargs: Any) -> None:
        super().__init__()
        require_tracker_package(self.name, *self.package)
        self.user_provided_run_name = run_name
        self.init_kwargs = kwargs
        self.task: Any = None
        self._initialized_externally = False

    @on_main_process
    def start(self) -> None:
        from clearml import Task

        current: Any = Task.current_task()
        if current is not None:
            # A task the user opened stays theirs: we report into it and never close it.
            self.task, self._initialized_externally = current, True
            return
        kwargs = dict(self.init_kwargs)
        kwargs.setdefault("project_name", os.environ.get("CLEARML_PROJECT", self.user_provided_run_name))
        kwargs.setdefault("task_name", os.environ.get("CLEARML_TASK", self.user_provided_run_name))
        with _repository_detection_in_init(Task):
            self.task = Task.init(**kwargs)

    @property
    def tracker(self) -> Any:
        return self.task

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.task.connect_configuration(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        logger = self.task.get_logger()
        for key, value in loggable(self.name, values, _ACCEPTED, dicts="flatten").items():
            if step is None:
                logger.report_single_value(name=key, value=value, **kwargs)
            else:
                title, series = _title_and_series(key)
                logger.report_scalar(title=title, series=series, value=value, iteration=step, **kwargs)

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Reports images (``name -> numpy array or PIL image``)."""
        logger = self.task.get_logger()
        for key, image in values.items():
            title, series = _title_and_series(key)
            logger.report_image(title=title, series=series, iteration=step, image=image, **kwargs)

    @on_main_process
    def log_table(
        self,
        table_name: str,
        columns: list[str] | None = None,
        data: list[list[Any]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
        **kwargs: Any,
    ) -> None:
        """Reports a table from a pandas ``dataframe``, or from ``columns`` and ``data`` rows."""
        if dataframe is None:
            if data is None:
                raise ValueError(
                    "ClearMLTracker.log_table needs `dataframe=` or `data=` rows (with `columns=`)."
                )
            dataframe = [list(columns)] + [list(row) for row in data] if columns is not None else data
        title, series = _title_and_series(table_name)
        self.task.get_logger().report_table(
            title=title, series=series, table_plot=dataframe, iteration=step, **kwargs
        )

    @on_main_process
    def finish(self) -> None:
        if self.task is not None and not self._initialized_externally:
            self.task.close()
