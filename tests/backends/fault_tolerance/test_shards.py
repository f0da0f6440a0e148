"""FSDP2 inside a replica group: shards as plain tensors for healing, and back (a one-process mesh)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from accelerate.backends.fault_tolerance.shards import (
    as_sharded_optimizer_state,
    load_model_shards,
    local,
    sharded_grads,
)


@pytest.fixture
def mesh() -> Iterator[DeviceMesh]:
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def _sharded_linear(mesh: DeviceMesh) -> torch.nn.Linear:
    model = torch.nn.Linear(3, 4)
    model.weight = torch.nn.Parameter(distribute_tensor(model.weight.detach(), mesh, [Shard(0)]))
    return model


def test_shards_travel_as_plain_tensors_and_load_back_into_the_shards(mesh: DeviceMesh) -> None:
    model = _sharded_linear(mesh)
    state = local({"models": [model.state_dict()], "n": 1})
    assert type(state["models"][0]["weight"]) is torch.Tensor and state["n"] == 1
    received = {"weight": torch.full((4, 3), 2.0), "bias": torch.full((4,), 3.0)}
    load_model_shards(model, received)
    assert isinstance(model.weight, DTensor) and torch.equal(model.weight.to_local(), received["weight"])
    assert torch.equal(model.bias, received["bias"])  # a plain parameter loads as usual
    with pytest.raises(ValueError, match="'weight'.*shard the model the same way"):
        load_model_shards(model, {"weight": torch.zeros(2, 3)})


def test_optimizer_state_becomes_sharded_like_its_parameter_and_grads_are_the_local_shards(
    mesh: DeviceMesh,
) -> None:
    model = _sharded_linear(mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    received = {
        "state": {0: {"momentum_buffer": torch.ones(4, 3), "step": torch.tensor(5.0)}},
        "param_groups": optimizer.state_dict()["param_groups"],
    }
    state = as_sharded_optimizer_state(optimizer, received)
    assert isinstance(state["state"][0]["momentum_buffer"], DTensor)
    assert type(state["state"][0]["step"]) is torch.Tensor  # a scalar stays plain
    optimizer.load_state_dict(state)
    model.weight.grad = distribute_tensor(torch.ones(4, 3), mesh, [Shard(0)])
    model.bias.grad = torch.ones(4)
    optimizer.step()  # the momentum is a DTensor like the parameter: the step mixes nothing
    grads = sharded_grads([optimizer])
    assert [type(grad) for grad in grads] == [torch.Tensor, torch.Tensor] and grads[0].shape == (4, 3)
