"""The checkpoint checks' training problem: each sample carries its index, so a run reports what it trained."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

NUM_SAMPLES, BATCH_SIZE = 32, 4  # 8 batches an epoch
SAVE_AFTER = 3  # committed steps before save_state


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def make_loader(num_samples: int = NUM_SAMPLES, shuffle: bool = True) -> DataLoader[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(num_samples, 3, generator=generator)
    data = TensorDataset(torch.arange(num_samples), x, x.sum(1, keepdim=True))
    return DataLoader(data, batch_size=BATCH_SIZE, shuffle=shuffle)


def make_optimizer(model: torch.nn.Module) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)  # state of its own, to resume
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.9**step)


def loss_of(model: torch.nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    _, x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)
