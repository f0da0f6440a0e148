"""The tracker base class, the main-process guard, and how logged values become loggable."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from accelerate.utils.imports import is_package_available

F = TypeVar("F", bound=Callable[..., Any])
_logger = logging.getLogger("accelerate.tracking")


def on_main_process(function: F) -> F:
    """Runs a tracker method on the main process only, unless the tracker says
    ``main_process_only = False`` (then every process runs it, e.g. one wandb run per rank)."""

    @functools.wraps(function)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "main_process_only", True):
            from accelerate.state import PartialState

            if not PartialState().is_main_process:
                return None
        return function(self, *args, **kwargs)

    return run  # type: ignore[return-value]


class GeneralTracker:
    """A tracker: ``start``, ``store_init_configuration``, ``log`` and ``finish``. Subclass it for your own.

    A subclass sets ``name`` (the key of ``init_kwargs``/``log_kwargs`` and of ``get_tracker``), and may
    set ``requires_logging_directory`` (the Accelerator then passes its logging dir to the constructor),
    ``main_process_only`` (False: every process runs it) and a ``tracker`` property (the wrapped run).
    The built-in trackers only record their arguments in ``__init__``; ``start()`` opens the run.

    Example:
        >>> class Printer(GeneralTracker):
        ...     name = "printer"
        ...     def log(self, values, step=None, **kwargs):
        ...         print(step, values)
        >>> Accelerator(log_with=Printer())  # doctest: +SKIP
    """

    name: str
    requires_logging_directory: bool = False
    main_process_only: bool = True

    def __init__(self, _blank: bool = False) -> None:
        # `_blank=True` is the do-nothing stand-in `get_tracker` hands to processes that run no tracker.
        if not _blank and not isinstance(getattr(self, "name", None), str):
            raise NotImplementedError(
                f"{type(self).__name__} subclasses GeneralTracker but sets no `name`: add a class attribute "
                "such as `name = 'my_tracker'` (it keys init_kwargs, log_kwargs and get_tracker)."
            )

    @property
    def tracker(self) -> Any:
        """The underlying run or writer object (None for a tracker without one)."""
        return None

    def start(self) -> None:  # noqa: B027 - optional hook
        """Opens the run; called once by ``Accelerator.init_trackers``."""

    def store_init_configuration(self, values: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Records the hyperparameters of the run."""

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:  # noqa: B027
        """Records ``values`` (name -> value) at ``step``."""

    def finish(self) -> None:  # noqa: B027
        """Closes the run, flushing what is pending."""


class ProjectRunTracker(GeneralTracker):
    """A backend whose package opens one run with ``<package>.init(project=run_name, **kwargs)`` and
    keeps the run's configuration in ``<package>.config`` (wandb, SwanLab, Trackio share this shape)."""

    package: tuple[str, str]  # (module to import, pip name)
    allow_val_change: bool = True  # passed to config.update (the backends that accept it)

    def __init__(self, run_name: str, **kwargs: Any) -> None:
        super().__init__()
        require_tracker_package(self.name, *self.package)
        self.run_name = run_name
        self.init_kwargs = kwargs
        self.run: Any = None

    def _backend(self) -> Any:
        import importlib

        return importlib.import_module(self.package[0])

    @on_main_process
    def start(self) -> None:
        self.run = self._backend().init(project=self.run_name, **self.init_kwargs)

    @property
    def tracker(self) -> Any:
        return self.run

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        extra = {"allow_val_change": True} if self.allow_val_change else {}
        self._backend().config.update(values, **extra)


def require_tracker_package(tracker: str, module: str, pip_name: str) -> None:
    """Raises ImportError naming the pip command when ``module`` is not installed (found, not imported)."""
    if not is_package_available(module):
        raise ImportError(
            f"The {tracker} tracker (log_with={tracker!r}) needs the `{pip_name}` package, which is not "
            f"installed. Install it with: pip install {pip_name}"
        )


def as_number(value: Any) -> int | float | None:
    """``value`` as a Python number when it is one: ints, floats, bools, one-element tensors and numpy
    scalars (``accelerator.log({"loss": loss})`` with a 0-d tensor is the common case); else None."""
    if isinstance(value, bool | int | float):
        return value
    numel = getattr(value, "numel", None) or getattr(value, "size", None)
    item = getattr(value, "item", None)
    if callable(item) and (numel == 1 or (callable(numel) and numel() == 1)):
        number = item()
        if isinstance(number, bool | int | float):
            return number
    return None


class UnloggableValue(TypeError):
    """A value a tracker has no way to record."""


_WARNED: set[tuple[str, str]] = set()


def skip_unloggable(tracker: str, key: str, value: Any, accepted: str) -> None:
    """A tensor or array of several numbers raises (it is a mistake: reduce it first); any other type
    the tracker cannot record is skipped with one warning per key, never silently."""
    shape = getattr(value, "shape", None)
    what = type(value).__name__ + (f" of shape {tuple(shape)}" if shape is not None else "")
    message = f"The {tracker} tracker cannot log {key!r}: a {what}. It records {accepted}."
    if shape is not None:
        raise UnloggableValue(f"{message} Reduce it to one number first (e.g. `t.mean().item()`).")
    if (tracker, key) not in _WARNED:
        _WARNED.add((tracker, key))
        _logger.warning("%s Skipping it.", message)


def loggable(
    tracker: str,
    values: dict[str, Any],
    accepted: str,
    *,
    keep: Callable[[Any], bool] = lambda value: False,
    dicts: str | None = None,
    prefix: str = "",
) -> dict[str, Any]:
    """``values`` with numbers (one-element tensors become Python numbers) and whatever ``keep`` accepts;
    dicts are kept nested (``dicts="nest"``), flattened to ``"outer/inner"`` keys (``"flatten"``) or
    skipped (None). Everything else goes through ``skip_unloggable`` (raise for arrays, else warn)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        number = as_number(value)
        if number is not None:
            out[key if dicts != "flatten" else name] = number
        elif isinstance(value, dict) and dicts == "nest":
            out[key] = loggable(tracker, value, accepted, keep=keep, dicts=dicts, prefix=f"{name}/")
        elif isinstance(value, dict) and dicts == "flatten":
            out.update(loggable(tracker, value, accepted, keep=keep, dicts=dicts, prefix=f"{name}/"))
        elif keep(value):
            out[key if dicts != "flatten" else name] = value
        else:
            skip_unloggable(tracker, name, value, accepted)
    return out


def is_media(value: Any) -> bool:
    """Not a tensor or array: strings and the tracker's own objects (images, tables, histograms)."""
    return getattr(value, "shape", None) is None
