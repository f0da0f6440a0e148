"""A tiny transformer-like model, its tensor-parallel plan, data and the one-process reference run.

Top-level module so that pool workers, launched scripts and the bench import the same definitions.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tests.backends.fsdp.fsdp_models import train_reference

VOCAB, WIDTH, HEADS, SEQ, OUT, DEPTH = 16, 16, 4, 6, 3, 2


class Attention(nn.Module):
    """Attention-shaped linears: q, k, v split by heads (colwise), o joins them (rowwise).

    The head count is read from the local width, so the same code runs on a rank's share of heads.
    """

    def __init__(self) -> None:
        super().__init__()
        # No q/k/v biases (as most LLMs): k's bias has a zero gradient in exact arithmetic, so AdamW
        # would turn rounding noise into full-size steps and no two topologies could agree.
        self.q, self.k, self.v = (nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(3))
        self.o = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        head_dim = WIDTH // HEADS

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq, -1, head_dim).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        weights = torch.softmax(q @ k.transpose(-1, -2) / head_dim**0.5, dim=-1)
        return self.o((weights @ v).transpose(1, 2).reshape(batch, seq, -1))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attn = Attention()
        self.fc1, self.fc2 = nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(torch.tanh(self.fc1(self.norm2(x))))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList([Block() for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, OUT)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


def make_model(seed: int = 0) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM()


def tp_plan() -> dict[str, Any]:
    """Megatron-style plan: q/k/v and fc1 split by output columns, o and fc2 by input rows."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan: dict[str, Any] = {}
    for i in range(DEPTH):
        for name in ("attn.q", "attn.k", "attn.v", "fc1"):
            plan[f"blocks.{i}.{name}"] = ColwiseParallel()
        for name in ("attn.o", "fc2"):
            plan[f"blocks.{i}.{name}"] = RowwiseParallel()
    return plan


def apply_tp(model: nn.Module, tp_mesh: Any) -> nn.Module:
    from torch.distributed.tensor.parallel import parallelize_module

    return parallelize_module(model, tp_mesh, tp_plan())


def dataset(num_samples: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (num_samples, SEQ), generator=gen)
    return tokens, torch.randn(num_samples, SEQ, OUT, generator=gen)


def reference_run(
    steps: int, accum: int, global_batch: int, max_norm: float, lr: float = 1e-2
) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The same training in one process, each micro-step on the whole global batch."""
    return train_reference(
        make_model(), dataset(steps * accum * global_batch), steps, accum, global_batch, max_norm, lr
    )
