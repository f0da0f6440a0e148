"""FSDP2 in one process on a CUDA GPU: ``fully_shard`` on a one-rank NCCL mesh trains, with and without
CPU offload of the sharded parameters (bf16 compute through the plugin's MixedPrecisionPolicy).

One process gives a one-rank mesh, so nothing is actually split; the sharding across GPUs is a
``multi_gpu`` test. Marked ``cuda``: skipped without a GPU (conftest).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from accelerate.backends.fsdp.strategy import FSDPStrategy
from accelerate.utils import FullyShardedDataParallelPlugin
from tests.training_helpers import global_batches, make_model

pytestmark = pytest.mark.cuda


@pytest.fixture
def one_rank_nccl_group() -> Iterator[None]:
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("offload", [False, True], ids=["on-gpu", "cpu-offload"])
def test_fully_shard_trains_on_one_gpu(one_rank_nccl_group: None, offload: bool) -> None:
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, cpu_offload=offload)
    strategy = FSDPStrategy(
        torch.device("cuda", 0), plugin, mixed_precision="bf16", num_processes=1, num_processes_per_node=1
    )
    model = strategy.setup_module(make_model(width=32), device_placement=True)
    assert isinstance(model, FSDPModule)
    params = list(model.parameters())
    assert params and all(isinstance(p, DTensor) for p in params)
    assert {p.device.type for p in params} == {"cpu" if offload else "cuda"}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    strategy.setup_optimizer(optimizer)
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    losses = []
    for x, y in global_batches(12, 16):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x.cuda()).float(), y.cuda())
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert seen[0] == torch.bfloat16
    assert losses[-1] < losses[0]
    assert {p.device.type for p in model.parameters()} == {"cpu" if offload else "cuda"}
