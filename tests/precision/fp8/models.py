"""A small model and data for the fp8 tests: its two blocks' linears are fp8-eligible, the input
and output layers (first and last) stay in high precision under upstream's default filter."""

from __future__ import annotations

import torch
from torch import nn

IN, HIDDEN, OUT = 8, 64, 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(HIDDEN, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.fc2(torch.relu(self.fc1(x)))
        return out


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(IN, HIDDEN)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.out = nn.Linear(HIDDEN, OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        out: torch.Tensor = self.out(h)
        return out


def make_model(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net()


def dataset(n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and the targets of a fixed random teacher (learnable, so the loss falls)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, IN, generator=generator)
    teacher = torch.randn(IN, OUT, generator=generator)
    return x, torch.tanh(x @ teacher)


def plain_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict as ordinary CPU tensors (sendable between processes, comparable)."""
    return {k: torch.Tensor(v.detach().cpu()).clone() if type(v) is not torch.Tensor else v.detach().clone()
            for k, v in state.items()}  # fmt: skip
