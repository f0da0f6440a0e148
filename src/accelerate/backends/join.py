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
    joinables: Sequence[Joinable],
    *,
    dataloaders: Sequence[Any],
    distributed_type: Any,
    even_batches: bool | None,
    default_even_batches: bool = True,
) -> Iterator[None]:
    """Runs the block under ``Join(joinables)``, with the loaders' ``even_batches`` set as asked.

    As upstream: only multi-process data parallelism (DDP: a ``MULTI_*`` type; upstream leaves
    MULTI_CPU out, here gloo processes join too) joins; ``Join`` is enabled when the
    loaders do not even out the batches themselves (``even_batches`` False, given or the
    Accelerator's), and a dispatching loader keeps its setting, with a warning. Under another
    distributed setup (FSDP, DeepSpeed, XLA) the block runs as it is, with a warning; in one
    process it simply runs.
    """
    kind = str(getattr(distributed_type, "value", distributed_type))
    if not kind.startswith("MULTI_"):
        if kind != "NO":
            warnings.warn(
                "Joining uneven inputs is only supported for multi-GPU training, as a result "
                "`join_uneven_inputs` will have no effect.",
                stacklevel=3,
            )
        yield
        return
    from accelerate.data.dispatcher import DataLoaderDispatcher

    holders = []
    if even_batches is not None:
        if any(isinstance(loader, DataLoaderDispatcher) for loader in dataloaders):
            warnings.warn(
                "Overridding even_batches is only supported for map-style datasets, yet some dataloaders given "
                "were iterable",
                stacklevel=3,
            )
        holders = _batch_samplers([d for d in dataloaders if not isinstance(d, DataLoaderDispatcher)])
    else:
        even_batches = default_even_batches
    before = [holder.even_batches for holder in holders]
    for holder in holders:
        holder.even_batches = even_batches
    try:
        with Join(list(joinables), enable=not even_batches, throw_on_early_termination=False):
            yield
    finally:
        for holder, value in zip(holders, before, strict=True):
            holder.even_batches = value
