"""Rebuilding what a ``state_dict()`` returns with its leaves replaced, keeping its containers as they are."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

__all__ = ["map_leaves"]


def map_leaves(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` (nested dicts, lists, tuples and namedtuples) with every other object ``x`` replaced by ``leaf(x)``.

    A dict is rebuilt from ``copy.copy``, so it keeps its class (``OrderedDict``) and attributes such
    as the ``_metadata`` of a module's state dict, which ``load_state_dict`` reads.

    Example:
        >>> map_leaves({"w": [1, (2, 3)]}, lambda x: x * 10)
        {'w': [10, (20, 30)]}
    """
    if isinstance(value, dict):
        out = copy.copy(value)
        for key, item in value.items():
            out[key] = map_leaves(item, leaf)
        return out
    if isinstance(value, list):
        return [map_leaves(item, leaf) for item in value]
    if isinstance(value, tuple):
        items = [map_leaves(item, leaf) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return leaf(value)
