"""A small transformer-like model, its data and a plain one-process reference loop for the FSDP tests.

Top-level module so that pool workers and launched scripts import the same definitions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

WIDTH, DEPTH, IN, OUT = 16, 4, 8, 2


class Block(nn.Module):
    """A pre-norm residual MLP block (a transformer layer without attention)."""

    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.tanh(self.fc1(self.norm(x))))


class BertLayer(Block):
    """Named like the block class upstream's FSDP config template wraps."""


class TinyTransformer(nn.Module):
    def __init__(self, block: type[nn.Module] = Block, depth: int = DEPTH) -> None:
        super().__init__()
        self.embed = nn.Linear(IN, WIDTH)
        self.blocks = nn.ModuleList([block() for _ in range(depth)])
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


def make_model(seed: int = 0, block: type[nn.Module] = Block) -> TinyTransformer:
    torch.manual_seed(seed)
    return TinyTransformer(block)


def dataset(num_samples: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(num_samples, IN, generator=gen), torch.randn(num_samples, OUT, generator=gen)


def reference_run(
    steps: int, accum: int, global_batch: int, max_norm: float, lr: float = 1e-2
) -> tuple[dict[str, torch.Tensor], list[float]]:
    """The same training as the FSDP tests, in one process with full micro-batches of ``global_batch``."""
    return train_reference(
        make_model(), dataset(steps * accum * global_batch), steps, accum, global_batch, max_norm, lr
    )


def train_reference(
    model: nn.Module,
    data: tuple[torch.Tensor, torch.Tensor],
    steps: int,
    accum: int,
    global_batch: int,
    max_norm: float,
    lr: float = 1e-2,
) -> tuple[dict[str, torch.Tensor], list[float]]:
    """Trains ``model`` in one process as the distributed tests do (AdamW, accumulation, clipping), each
    micro-step on the whole global batch; returns its final state and the norm before each clip."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    x, y = data
    norms = []
    for step in range(steps):
        for micro in range(accum):
            start = (step * accum + micro) * global_batch
            loss = F.mse_loss(model(x[start : start + global_batch]), y[start : start + global_batch])
            (loss / accum).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)))
        optimizer.step()
        optimizer.zero_grad()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, norms


class TiedNet(nn.Module):
    """A token model whose output projection shares the embedding's weight (tied embeddings)."""

    def __init__(self, vocab: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, WIDTH)
        self.block = Block()
        self.out = nn.Linear(WIDTH, vocab, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.block(self.embed(tokens)))
