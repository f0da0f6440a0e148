"""The chaos check's training problem, shared by the replica groups and the reference run."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

BATCH_SIZE = 4
NUM_SAMPLES = 4 * 60  # 60 batches: 20 steps with 3 groups, more while one is down
KILL_STEP = 4  # the victim dies during this step (after its forward, before its gradient exchange)
LR = 0.05


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def make_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)  # momentum: optimizer state heals too


def make_scheduler(optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LambdaLR:
    """Written for one process: one step per batch (a committed step advances it by its real batches)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.98**step)


def make_dataset() -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(NUM_SAMPLES, 6, generator=generator)
    return TensorDataset(x, torch.stack([x[:, :3].sum(1), x[:, 3:].prod(1)], 1))


def make_loader() -> DataLoader[tuple[torch.Tensor, ...]]:
    return DataLoader(make_dataset(), batch_size=BATCH_SIZE, shuffle=True)


def loss_of(model: torch.nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)
