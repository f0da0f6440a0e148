"""Tracker base class and the registry of built-in trackers."""

from __future__ import annotations

import importlib
from typing import Any

_BUILTIN = {
    "tensorboard": ("accelerate.tracking.tensorboard", "TensorBoardTracker"),
    "wandb": ("accelerate.tracking.wandb", "WandBTracker"),
    "mlflow": ("accelerate.tracking.mlflow", "MLflowTracker"),
}
_PIP = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
_MODULE = {"tensorboard": "torch.utils.tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


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
        import logging

        logging.getLogger("accelerate.tracking").warning("%s Skipping it.", message)


class GeneralTracker:
    """A tracker: ``store_init_configuration``, ``log`` and ``finish``. Subclass it for your own."""

    name: str = "general"
    requires_logging_directory: bool = False

    @property
    def tracker(self) -> Any:
        return None

    def store_init_configuration(self, values: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        pass

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:  # noqa: B027
        pass

    def finish(self) -> None:  # noqa: B027
        pass


def check_trackers(log_with: Any) -> list[Any]:
    """Validates ``log_with`` (a name, ``"all"``, a tracker object or a list of them) before training."""
    items = log_with if isinstance(log_with, list | tuple) else [log_with]
    out: list[Any] = []
    for item in items:
        if isinstance(item, GeneralTracker):
            out.append(item)
            continue
        name = str(getattr(item, "value", item)).lower()
        if name == "all":
            out.extend(n for n in _BUILTIN if _importable(n))
            continue
        if name not in _BUILTIN:
            raise ValueError(
                f"log_with={item!r} is not a known tracker; choose from {sorted(_BUILTIN)} or 'all'."
            )
        if not _importable(name):
            raise ImportError(f"log_with={name!r} needs the `{_PIP[name]}` package: pip install {_PIP[name]}")
        out.append(name)
    return out


def _importable(name: str) -> bool:
    from accelerate.utils.imports import is_package_available

    return is_package_available(_PIP[name])


def make_tracker(name: Any, project_name: str, logging_dir: str | None, **kwargs: Any) -> GeneralTracker:
    if isinstance(name, GeneralTracker):
        return name
    module, cls = _BUILTIN[name]
    tracker_cls = getattr(importlib.import_module(module), cls)
    tracker: GeneralTracker = tracker_cls(project_name, logging_dir, **kwargs)
    return tracker
