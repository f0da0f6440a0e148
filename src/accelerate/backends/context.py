"""`PrepareContext`: what a strategy that prepares objects together reads of the run, as values.

DeepSpeed builds one engine from the model, the optimizer and the scheduler: it needs the batch size
of the prepared data loaders, the accumulation steps, the precision's model checks, the compile
settings and a way to prepare the data loaders of the same call. The preparation step
(``accelerate.preparation``) builds this context once per ``prepare()`` call and hands it over, so a
strategy never sees the Accelerator and can be tested with a context built by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from accelerate.backends.registry import Prepared

if TYPE_CHECKING:
    from accelerate.config.dynamo import TorchDynamoPlugin
    from accelerate.precision.amp import Precision


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrepareContext:
    """The run's values one ``prepare()`` call hands to ``Strategy.prepare_jointly``.

    Example:
        >>> context = PrepareContext(
        ...     num_processes=2, split_batches=False, gradient_accumulation_steps=1, precision=precision,
        ...     dynamo_plugin=None, prepare_data_loader=lambda loader, placement: loader, prepared=Prepared(),
        ... )
    """

    num_processes: int
    # Whether a loader's batch is split over the processes (else each process reads a whole batch).
    split_batches: bool
    gradient_accumulation_steps: int
    # The model checks and forward wrapper a strategy applies before it builds its own wrapper.
    precision: Precision
    dynamo_plugin: TorchDynamoPlugin | None
    # ``prepare_data_loader(loader, device_placement)``: the facade's, which records the loader.
    prepare_data_loader: Callable[[Any, bool | None], Any]
    # What earlier prepare() calls made (read only: the facade alone writes it).
    prepared: Prepared = dataclasses.field(default_factory=Prepared)
