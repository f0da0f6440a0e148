"""Checks on objects handed to ``register_for_checkpointing``."""

from __future__ import annotations

from typing import Any


class NotStatefulError(ValueError, TypeError):
    """An object without ``state_dict()``/``load_state_dict()`` was registered for checkpointing.

    A ``ValueError``, as upstream raises there, and a ``TypeError`` for callers that catch that.
    """


def check_checkpointable(obj: Any) -> None:
    """Raises :class:`NotStatefulError` unless ``obj`` has callable ``state_dict`` and ``load_state_dict``.

    Checked at registration so the mistake surfaces at once rather than at the first save,
    possibly hours into a run.
    """
    missing = [name for name in ("state_dict", "load_state_dict") if not callable(getattr(obj, name, None))]
    if missing:
        raise NotStatefulError(
            f"register_for_checkpointing got an object of type {type(obj).__module__}.{type(obj).__qualname__} "
            f"that has no {' or '.join(f'`{m}()`' for m in missing)} method. Objects saved with save_state "
            "must provide both `state_dict()` (returning tensors and plain Python values) and "
            "`load_state_dict(state)`."
        )
