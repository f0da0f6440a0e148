"""FSDP2 inside a replica group: the gradient-shard exchange across groups and healing by shard.

Inside a group of FSDP2 processes every parameter (and its gradient and optimizer state) is a
``DTensor`` of which each process holds its own shard; FSDP2 reduce-scatters the gradient inside
the group during backward. Across groups, each process then exchanges its gradient shard with the
same-rank process of the other groups (torchft's per-rank model: same layout, same shard), and heals
its own shard from its same-rank peer. The healing state is the shards as plain tensors (the wire
format carries no tensor subclass); loading puts them back into this process's shards.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.distributed.tensor import DTensor


def local(tree: Any) -> Any:
    """``tree`` with every DTensor replaced by this process's shard (a plain tensor)."""
    if isinstance(tree, DTensor):
        return tree.to_local()
    if isinstance(tree, dict):
        return {key: local(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(local(value) for value in tree)
    return tree


def load_model_shards(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copies received shards into ``model``'s own (plain tensors load as usual)."""
    own = model.state_dict()
    plain = {key: value for key, value in weights.items() if not isinstance(own.get(key), DTensor)}
    with torch.no_grad():
        for key, value in weights.items():
            target = own.get(key)
            if isinstance(target, DTensor):
                shard = target.to_local()
                if shard.shape != value.shape:
                    raise ValueError(
                        f"healing: the peer's shard of {key!r} has shape {tuple(value.shape)}, this process's "
                        f"{tuple(shard.shape)}: every replica group must shard the model the same way."
                    )
                shard.copy_(value)
    if plain:
        model.load_state_dict(plain, strict=False)


def as_sharded_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
    """A received optimizer state whose per-parameter tensors become DTensors like their parameters.

    An elementwise optimizer's state (momentum, moments) is sharded like its parameter; a tensor of
    the shard's shape is wrapped back into the parameter's mesh and placements, others (Adam's
    ``step``) stay plain.
    """
    params = [param for group in optimizer.param_groups for param in group["params"]]
    converted: dict[Any, Any] = {}
    for index, values in state["state"].items():
        param = params[int(index)]
        if not isinstance(param, DTensor):
            converted[index] = values
            continue
        shard_shape = param.to_local().shape
        converted[index] = {
            name: DTensor.from_local(value, param.device_mesh, param.placements, run_check=False)
            if isinstance(value, torch.Tensor) and value.shape == shard_shape and value.dim() > 0
            else value
            for name, value in values.items()
        }
    return {**state, "state": converted}


def sharded_grads(optimizers: Iterable[torch.optim.Optimizer]) -> list[torch.Tensor]:
    """This process's gradient shards of every parameter the optimizers step (plain views)."""
    grads = []
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    grad = param.grad
                    grads.append(grad.to_local() if isinstance(grad, DTensor) else grad)
    return grads
