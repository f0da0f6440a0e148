"""`Accelerator.join_uneven_inputs`: training on uneven inputs with ``torch.distributed.algorithms.Join``.

Processes that run out of batches early shadow the collectives of the others (DDP's gradient
all-reduce), so nobody hangs. While inside, the prepared dataloaders can stop completing the last
round with duplicates (``even_batches=False``), which is what makes the inputs uneven to begin with.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from torch.distributed.algorithms.join import Join, Joinable


def _batch_samplers(dataloaders: Sequence[Any]) -> list[Any]:
    """The prepared loaders' objects that hold an ``even_batches`` switch (sampler, shard or dispatcher)."""
    holders = []
    for loader in dataloaders:
        for candidate in (getattr(loader, "batch_sampler", None), getattr(loader, "dataset", None), loader):
            if candidate is not None and hasattr(candidate, "even_batches"):
                holders.append(candidate)
                break
    return holders


@contextlib.contextmanager
def join_uneven_inputs(
    joinables: Sequence[Joinable], *, dataloaders: Sequence[Any], distributed: bool, even_batches: bool | None
) -> Iterator[None]:
    """Runs the block under ``Join(joinables)``, with the loaders' ``even_batches`` set as asked.

    In one process there is nothing to join: the block runs as it is (with a warning if
    ``even_batches`` was given, since it changes nothing there).
    """
    if not distributed:
        if even_batches is not None:
            warnings.warn(
                "join_uneven_inputs(even_batches=...) has no effect in one process; the block runs as it is.",
                stacklevel=3,
            )
        yield
        return
    holders = _batch_samplers(dataloaders) if even_batches is not None else []
    before = [holder.even_batches for holder in holders]
    for holder in holders:
        holder.even_batches = even_batches
    try:
        with Join(list(joinables)):
            yield
    finally:
        for holder, value in zip(holders, before, strict=True):
            holder.even_batches = value
