"""Which trackers exist, which are installed, and turning ``log_with`` into started trackers."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from accelerate.tracking.aim import AimTracker
from accelerate.tracking.base import GeneralTracker
from accelerate.tracking.clearml import ClearMLTracker
from accelerate.tracking.cometml import CometMLTracker
from accelerate.tracking.dvclive import DVCLiveTracker
from accelerate.tracking.logger_type import LoggerType
from accelerate.tracking.mlflow import MLflowTracker
from accelerate.tracking.swanlab import SwanLabTracker
from accelerate.tracking.tensorboard import TensorBoardTracker
from accelerate.tracking.trackio import TrackioTracker
from accelerate.tracking.wandb import WandBTracker
from accelerate.utils.imports import is_package_available

# Importing these classes imports none of the tracker packages: each one loads its package in start().
LOGGER_TYPE_TO_CLASS: dict[str, type[GeneralTracker]] = {
    "aim": AimTracker,
    "comet_ml": CometMLTracker,
    "mlflow": MLflowTracker,
    "tensorboard": TensorBoardTracker,
    "wandb": WandBTracker,
    "clearml": ClearMLTracker,
    "dvclive": DVCLiveTracker,
    "swanlab": SwanLabTracker,
    "trackio": TrackioTracker,
}


def register_tracker_class(tracker_class: type[GeneralTracker]) -> type[GeneralTracker]:
    """Makes ``log_with=tracker_class.name`` build ``tracker_class`` (usable as a class decorator).

    Example:
        >>> @register_tracker_class
        ... class Printer(GeneralTracker):
        ...     name = "printer"
        ...     def __init__(self, run_name, **kwargs): super().__init__()
        >>> Accelerator(log_with="printer")  # doctest: +SKIP
    """
    if not (isinstance(tracker_class, type) and issubclass(tracker_class, GeneralTracker)):
        raise TypeError(f"register_tracker_class expects a GeneralTracker subclass, got {tracker_class!r}.")
    name = getattr(tracker_class, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"register_tracker_class: {tracker_class.__name__} needs a class attribute `name = '...'`."
        )
    LOGGER_TYPE_TO_CLASS[name] = tracker_class
    return tracker_class


def _is_installed(tracker_class: type[GeneralTracker]) -> bool:
    package = getattr(tracker_class, "package", None)
    return package is None or is_package_available(package[0])


def get_available_trackers() -> list[LoggerType]:
    """The built-in trackers whose package is installed here (found, not imported)."""
    return [
        LoggerType(name)
        for name, tracker_class in LOGGER_TYPE_TO_CLASS.items()
        if name in LoggerType and _is_installed(tracker_class)
    ]


def _known() -> list[str]:
    return sorted(LOGGER_TYPE_TO_CLASS)


def _resolve(log_with: Any, logging_dir: str | os.PathLike[str] | None, check_dir: bool) -> list[Any]:
    items = list(log_with) if isinstance(log_with, list | tuple) else [log_with]
    out: list[Any] = []

    def add(entry: Any) -> None:
        if entry not in out:
            out.append(entry)

    for item in items:
        if item is None:
            continue
        if isinstance(item, GeneralTracker):
            add(item)
            continue
        if isinstance(item, type) and issubclass(item, GeneralTracker):
            raise TypeError(
                f"log_with got the class {item.__name__}; pass an instance (log_with={item.__name__}(...)) "
                "or register it with register_tracker_class and pass its name."
            )
        if not isinstance(item, str):
            raise TypeError(
                f"log_with={item!r}: expected a tracker name, a LoggerType, a GeneralTracker instance or a "
                f"list of them; choose names from {_known()} or 'all'."
            )
        # A registered name is matched as written (users name classes "MyTracker"); built-ins in any case.
        if isinstance(item, LoggerType):
            name = item.value
        else:
            name = item if item in LOGGER_TYPE_TO_CLASS else item.lower()
        if name == "all":
            for member in get_available_trackers():
                add(member)
            continue
        tracker_class = LOGGER_TYPE_TO_CLASS.get(name)
        if tracker_class is None:
            raise ValueError(f"log_with={item!r} is not a known tracker; choose from {_known()} or 'all'.")
        if not _is_installed(tracker_class):
            pip_name = tracker_class.package[1]  # type: ignore[attr-defined]
            raise ImportError(
                f"log_with={name!r} needs the `{pip_name}` package, which is not installed. "
                f"Install it with: pip install {pip_name}"
            )
        if check_dir and tracker_class.requires_logging_directory and logging_dir is None:
            # Upstream's opening words (clients match on them), then how to give one.
            raise ValueError(
                f"Logging with `{name}` requires a `logging_dir` to be passed in: pass "
                "Accelerator(project_dir=...) or ProjectConfiguration(logging_dir=...)."
            )
        add(LoggerType(name) if name in LoggerType else name)
    return out


def filter_trackers(log_with: Any, logging_dir: str | os.PathLike[str] | None = None) -> list[Any]:
    """``log_with`` (a name, a ``LoggerType``, ``"all"``, a tracker instance, or a list of them) as a list of
    ``LoggerType`` members, registered names and tracker instances, without duplicates.

    ``"all"`` means every installed built-in tracker. An unknown name raises ValueError listing the choices;
    a tracker whose package is missing raises ImportError with the pip command (upstream drops it quietly);
    a tracker that writes files raises ValueError when ``logging_dir`` is None.
    """
    return _resolve(log_with, logging_dir, check_dir=True)


def check_trackers(log_with: Any, logging_dir: str | os.PathLike[str] | None = None) -> list[Any]:
    """``filter_trackers`` for ``Accelerator(log_with=...)``: a tracker that writes files needs the
    project's logging directory when the Accelerator is made (as upstream checks it)."""
    return _resolve(log_with, logging_dir, check_dir=True)


def build_tracker(
    entry: Any, project_name: str, logging_dir: str | os.PathLike[str] | None, init_kwargs: dict[str, Any]
) -> GeneralTracker:
    """The tracker for one ``log_with`` entry (an instance comes back as it is)."""
    if isinstance(entry, GeneralTracker):
        return entry
    name = str(entry)
    tracker_class = LOGGER_TYPE_TO_CLASS[name]
    # Subclasses take (run_name, [logging_dir,] **kwargs), not the base's (_blank).
    make: Callable[..., GeneralTracker] = tracker_class
    kwargs = init_kwargs.get(name, {})
    if tracker_class.requires_logging_directory:
        return make(project_name, logging_dir, **kwargs)
    if getattr(tracker_class, "takes_logging_dir", False) and logging_dir is not None:
        tracker = make(project_name, **kwargs)
        tracker.default_logging_dir = str(logging_dir)  # type: ignore[attr-defined]
        return tracker
    return make(project_name, **kwargs)


def start_trackers(
    log_with: Sequence[Any],
    project_name: str,
    config: dict[str, Any] | None,
    init_kwargs: dict[str, Any],
    *,
    logging_dir: str | os.PathLike[str] | None,
    is_main_process: bool,
) -> list[GeneralTracker]:
    """Builds and starts the trackers of ``Accelerator(log_with=...)`` (``log_with``: its checked list) that
    run on this process: all of them on the main process, those with ``main_process_only = False`` everywhere."""
    trackers = []
    for entry in log_with:
        tracker = build_tracker(entry, project_name, logging_dir, init_kwargs)
        if is_main_process or not getattr(tracker, "main_process_only", True):
            trackers.append(tracker)
    for tracker in trackers:
        tracker.start()
    if config is not None:
        for tracker in trackers:
            tracker.store_init_configuration(config)
    return trackers


def find_tracker(
    trackers: Sequence[GeneralTracker],
    log_with: Sequence[Any],
    name: str,
    unwrap: bool = False,
    *,
    is_main_process: bool,
) -> Any:
    """``Accelerator.get_tracker``: the started tracker (of ``trackers``) called ``name`` (its run object
    with ``unwrap``). A process that does not run a main-process tracker configured in ``log_with`` gets
    a do-nothing ``GeneralTracker``, so ``get_tracker(...).log(...)`` can be written once for every rank."""
    for tracker in trackers:
        if tracker.name == name:
            return tracker.tracker if unwrap else tracker
    configured = [entry.name if isinstance(entry, GeneralTracker) else str(entry) for entry in log_with]
    if name in configured and not is_main_process:
        return GeneralTracker(_blank=True)
    started = [tracker.name for tracker in trackers]
    raise ValueError(f"No tracker named {name!r} was started; started: {started}.")
