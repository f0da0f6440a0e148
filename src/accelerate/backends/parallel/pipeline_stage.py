"""What a pipeline stage becomes inside a 3-D mesh: FSDP2 over ``dp_shard`` once the stage is cut.

A traced stage is a ``GraphModule`` whose graph reads its parameters by attribute, not by calling
the model's submodules: hooks on those submodules never run. So FSDP2 shards the stage as one unit
(``fully_shard`` on the stage root, whose forward the schedule calls; torch's pipeline stage drives
its gradient sync: reduce-scatter after the last micro-batch of every step). The stage module's
parameters are replaced by shards; :class:`StageShards` remembers which original parameter each
shard stands for, so the optimizers, clipping and checkpoints built over ``model.parameters()``
reach the shards.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn


class StageShards:
    """The parameters of a rank's stages by identity: the model's originals -> the tensors trained."""

    def __init__(self) -> None:
        self._by_id: dict[int, torch.Tensor] = {}

    def add(self, before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor]) -> None:
        """Pairs a stage's parameters before and after sharding, by name."""
        for name, param in before.items():
            self._by_id[id(param)] = after.get(name, param)

    def trained(self, param: torch.Tensor) -> torch.Tensor | None:
        """The tensor this rank trains for the model's ``param`` (itself unless sharded), or None."""
        return self._by_id.get(id(param))

    def __len__(self) -> int:
        return len(self._by_id)


def compose_stage(stage: nn.Module, shards: StageShards, mesh: Any = None, **kwargs: Any) -> None:
    """Records ``stage``'s parameters in ``shards``; with a ``mesh``, ``fully_shard(stage)`` over it first."""
    before = dict(stage.named_parameters())
    if mesh is not None and before:
        from torch.distributed.fsdp import fully_shard

        fully_shard(stage, mesh=mesh, **kwargs)
    shards.add(before, dict(stage.named_parameters()))


def full_tensor(value: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) value gathered whole; any other tensor as is."""
    from torch.distributed.tensor import DTensor

    return value.full_tensor() if isinstance(value, DTensor) else value
