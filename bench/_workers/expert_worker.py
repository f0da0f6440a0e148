"""One rank of the expert-parallel benchmark (started by torchrun on 2 processes, ep=2).

A mixture-of-experts model (2 layers, width 256, 8 experts of width 512, top-2 routing; sequence 64,
batch 8 per rank; AdamW; global-norm clipping) trained two ways in the same processes, alternating
optimizer step by optimizer step: a hand-written loop (each rank builds only its experts, tokens sent
with ``torch.distributed.nn.functional.all_to_all_single`` after an exchange of counts, ``fully_shard``
over the other weights, expert gradients divided by hand) and the same model through
``Accelerator(parallelism_config=ParallelismConfig(ep_size=2))``. Writes DIR/rank{N}.json with CPU
seconds per optimizer step.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # torchrun runs this file as a script

from bench._workers.common import Step, accelerate_token_steps, adamw_prepared, race  # noqa: E402

WIDTH, INTER, EXPERTS, TOP_K, SEQ, BATCH = 256, 512, 8, 2, 64, 8
DEPTH, VOCAB, NUM_BATCHES, MAX_NORM = 2, 512, 4, 1.0


class Experts(nn.Module):
    """The experts protocol: ``num_experts``, stacked weights, a routed forward."""

    def __init__(self, num_experts: int) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.up = nn.Parameter(torch.randn(num_experts, INTER, WIDTH) * 0.05)
        self.down = nn.Parameter(torch.randn(num_experts, WIDTH, INTER) * 0.05)

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        out = torch.zeros_like(hidden_states)
        for expert in range(self.num_experts):
            token, slot = torch.where(top_k_index == expert)
            y = F.silu(hidden_states[token] @ self.up[expert].T) @ self.down[expert].T
            out = out.index_add(0, token, y * top_k_weights[token, slot, None])
        return out


class Layer(nn.Module):
    def __init__(self, experts: nn.Module) -> None:
        super().__init__()
        self.norm, self.router, self.experts = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, EXPERTS), experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = self.norm(x).reshape(-1, WIDTH)
        weights, index = self.router(flat).softmax(-1).topk(TOP_K, dim=-1)
        return x + self.experts(flat, index, weights).reshape(x.shape)


class Net(nn.Module):
    def __init__(self, experts: type[nn.Module] | Any) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList([Layer(experts()) for _ in range(DEPTH)])
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


class HandExperts(nn.Module):
    """This rank's experts only, and the hand-written exchange around them."""

    def __init__(self) -> None:
        super().__init__()
        ranks, rank = dist.get_world_size(), dist.get_rank()
        whole = Experts(EXPERTS)  # same seed on every rank: keep my slice
        self.local = EXPERTS // ranks
        self.up = nn.Parameter(whole.up.detach()[rank * self.local : (rank + 1) * self.local].clone())
        self.down = nn.Parameter(whole.down.detach()[rank * self.local : (rank + 1) * self.local].clone())

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        from torch.distributed.nn.functional import all_to_all_single

        ranks = dist.get_world_size()
        flat = top_k_index.reshape(-1)
        order = torch.argsort(flat, stable=True)
        token = order // TOP_K
        counts = torch.bincount(flat, minlength=EXPERTS)
        got = torch.empty_like(counts)
        dist.all_to_all_single(got, counts)
        send = counts.view(ranks, self.local).sum(1).tolist()
        recv = got.view(ranks, self.local).sum(1).tolist()
        x = all_to_all_single(hidden_states.new_empty(sum(recv), WIDTH), hidden_states[token], recv, send)
        expert = torch.arange(self.local).repeat(ranks).repeat_interleave(got)
        y = torch.zeros_like(x)
        for e in range(self.local):
            rows = torch.where(expert == e)[0]
            y = y.index_add(0, rows, F.silu(x[rows] @ self.up[e].T) @ self.down[e].T)
        y = y + x.sum() * 0  # both exchanges' backward run on every rank
        back = all_to_all_single(hidden_states.new_empty(sum(send), WIDTH), y, send, recv)
        return torch.zeros_like(hidden_states).index_add(
            0, token, back * top_k_weights.reshape(-1)[order, None]
        )


def batches(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen),) * 2 for _ in range(NUM_BATCHES)]


def clip(params: list[nn.Parameter], experts: set[int], max_norm: float) -> None:
    """Global norm: FSDP's DTensor shards, plus each rank's own experts summed over ranks."""
    from torch.distributed.tensor import DTensor

    sharded = [p.grad for p in params if p.grad is not None and id(p) not in experts]
    mine = [p.grad for p in params if p.grad is not None and id(p) in experts]
    norm = torch.nn.utils.get_total_norm(sharded)
    total = (norm.full_tensor() if isinstance(norm, DTensor) else norm) ** 2
    local = torch.nn.utils.get_total_norm(mine) ** 2
    dist.all_reduce(local)
    coef = min(1.0, max_norm / (math.sqrt(float(total + local)) + 1e-6))
    if coef < 1.0:
        for g in sharded + mine:
            g.mul_(coef)


def raw_loop() -> Step:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("dp_shard",))
    torch.manual_seed(0)
    model = Net(HandExperts)
    experts = {p for layer in model.layers for p in layer.experts.parameters()}
    fully_shard(model, mesh=mesh, ignored_params=experts, reshard_after_forward=None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data, ranks, step = batches(dist.get_rank()), dist.get_world_size(), [0]

    def run() -> None:
        x, y = data[step[0] % NUM_BATCHES]
        step[0] += 1
        F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
        for p in experts:
            p.grad.div_(ranks)  # type: ignore[union-attr]  (every rank's tokens: the mean over ranks)
        clip(list(model.parameters()), {id(p) for p in experts}, MAX_NORM)
        optimizer.step()
        optimizer.zero_grad()

    return run


def accelerate_loop() -> Step:
    from accelerate import Accelerator
    from accelerate.utils import ParallelismConfig

    accelerator = Accelerator(parallelism_config=ParallelismConfig(ep_size=dist.get_world_size()))
    torch.manual_seed(0)
    model, optimizer = adamw_prepared(accelerator, Net(lambda: Experts(EXPERTS)))
    return accelerate_token_steps(
        accelerator, model, optimizer, batches(accelerator.state.run.data_shards[1]), MAX_NORM
    )


if __name__ == "__main__":
    race(lambda _: raw_loop(), lambda _: accelerate_loop())
