"""`Prepared`: what one Accelerator has prepared so far, handed to the strategies that need it.

A strategy that builds one object from several (DeepSpeed's engine from the model, the optimizer
and the scheduler) must know what earlier ``prepare`` calls made: the dataloader whose batch size
fills its config, the optimizers a scheduler wrapper follows. It receives this registry as an
argument instead of reading the Accelerator's private attributes, so a strategy imports nothing
above ``backends/`` and can be tested with a registry built by hand.

The Accelerator owns the one instance and is the only writer (it appends as it prepares and clears
on ``free_memory``); strategies read it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclasses.dataclass
class Prepared:
    """The prepared objects of one Accelerator, each list in the order it prepared them.

    Example:
        >>> prepared = Prepared()
        >>> prepared.dataloaders.append(loader)  # what Accelerator.prepare_data_loader records
    """

    models: list[torch.nn.Module] = dataclasses.field(default_factory=list)
    # AcceleratedOptimizer / AcceleratedScheduler (those modules sit above backends/, so not named here).
    optimizers: list[Any] = dataclasses.field(default_factory=list)
    schedulers: list[Any] = dataclasses.field(default_factory=list)
    dataloaders: list[Any] = dataclasses.field(default_factory=list)

    def clear(self) -> None:
        """Forgets every object (``Accelerator.free_memory``); the lists stay the same objects."""
        for objects in (self.models, self.optimizers, self.schedulers, self.dataloaders):
            objects.clear()


def object_kind(obj: Any) -> str:
    """What ``prepare`` sees in ``obj``: "model", "optimizer", "dataloader", "scheduler" or "other"."""
    import torch

    if isinstance(obj, torch.nn.Module):
        return "model"
    if isinstance(obj, torch.optim.Optimizer):
        return "optimizer"
    if isinstance(obj, torch.utils.data.DataLoader):
        return "dataloader"
    if _is_scheduler(obj):
        return "scheduler"
    return "other"


def _is_scheduler(obj: Any) -> bool:
    import torch

    from accelerate.scheduler import AcceleratedScheduler

    lr_scheduler = torch.optim.lr_scheduler
    base = getattr(lr_scheduler, "LRScheduler", None) or lr_scheduler._LRScheduler
    return isinstance(obj, base | lr_scheduler.ReduceLROnPlateau | AcceleratedScheduler)
