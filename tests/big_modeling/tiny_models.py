"""Small models for the big-model tests: blocks, tied embeddings, a buffer at the root."""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


class TiedLM(nn.Module):
    """Embedding -> blocks -> head, the head sharing the embedding's weight."""

    def __init__(self, dim: int = 32, layers: int = 6, vocab: int = 50) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([Block(dim) for _ in range(layers)])
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x) * self.scale


def reference(seed: int = 0, **sizes: int) -> TiedLM:
    torch.manual_seed(seed)
    return TiedLM(**sizes).eval()
