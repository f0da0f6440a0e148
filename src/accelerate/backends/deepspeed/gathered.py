"""``GatheredParameters``: full parameters for a moment, where DeepSpeed ZeRO-3 partitions them.

Under ZeRO-3 each process holds a slice of every parameter; code that reads or edits whole weights
(initialising them, copying a head) must gather them first. Everywhere else parameters are already
whole, so the context does nothing; code written with it runs unchanged with or without ZeRO-3.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import torch


def _partitioned(params: Any) -> bool:
    """Whether any of ``params`` is a ZeRO-3 partitioned parameter (DeepSpeed tags them with ``ds_id``)."""
    if isinstance(params, torch.Tensor):
        params = [params]
    elif not isinstance(params, Iterable):
        return False
    return any(hasattr(p, "ds_id") for p in params)


def GatheredParameters(  # noqa: N802 - upstream's name (a function that returns a context manager)
    params: Any, modifier_rank: int | None = None, fwd_module: Any = None, enabled: bool = True
) -> contextlib.AbstractContextManager[Any]:
    """A context in which ``params`` are whole on every process.

    Args:
        params: a parameter or an iterable of parameters (e.g. ``model.parameters()``).
        modifier_rank: the process whose edits are kept and sent to the others on exit (ZeRO-3 only).
        fwd_module: passed to DeepSpeed (registers external parameters; ZeRO-3 only).
        enabled: False makes the context do nothing.

    Without ZeRO-3 partitioned parameters the context does nothing and edits made inside it stay,
    as on any tensor.

    Example:
        >>> with GatheredParameters(model.head.parameters(), modifier_rank=0):
        ...     model.head.weight.zero_()
    """
    if not enabled:
        return contextlib.nullcontext()
    params = list(params) if not isinstance(params, torch.Tensor) and isinstance(params, Iterable) else params
    if not _partitioned(params):
        return contextlib.nullcontext()
    # Partitioned parameters exist only when DeepSpeed made them, so it is importable here
    # (``deepspeed.zero`` is an attribute of the package, not an importable module).
    from accelerate.backends.deepspeed.runtime import import_deepspeed

    zero = import_deepspeed().zero
    context: contextlib.AbstractContextManager[Any] = zero.GatheredParameters(
        params, modifier_rank=modifier_rank, fwd_module=fwd_module, enabled=True
    )
    return context
