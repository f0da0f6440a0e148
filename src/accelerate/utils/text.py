"""Small formatting helpers for messages: sizes in bytes, names of objects."""

from __future__ import annotations

from typing import Any

_UNITS = ("bytes", "KB", "MB", "GB", "TB")


def convert_bytes(size: float) -> str:
    """``size`` (bytes) in the largest binary unit below 1024 of it, rounded to 2 decimals.

    Example:
        >>> convert_bytes(1536)
        '1.5 KB'
    """
    for unit in _UNITS:
        if abs(size) < 1024.0:
            return f"{round(size, 2)} {unit}"
        size /= 1024.0
    return f"{round(size, 2)} PB"


def get_pretty_name(obj: Any) -> str:
    """A readable name: the qualified name of a class or function, else that of ``obj``'s class.

    Example:
        >>> get_pretty_name(torch.nn.Linear(1, 1))
        'Linear'
    """
    if not hasattr(obj, "__qualname__") and not hasattr(obj, "__name__"):
        obj = getattr(obj, "__class__", obj)
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    return str(name) if name is not None else str(obj)
