"""`Prepared`: the Accelerator's registry of prepared objects, which strategies receive as an argument."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.backends.registry import Prepared


def test_clear_forgets_everything_and_keeps_the_lists() -> None:
    prepared = Prepared()
    lists = (prepared.models, prepared.optimizers, prepared.schedulers, prepared.dataloaders)
    for objects in lists:
        objects.append(torch.nn.Linear(1, 1))
    prepared.clear()
    assert (prepared.models, prepared.optimizers, prepared.schedulers, prepared.dataloaders) == (
        [],
        [],
        [],
        [],
    )
    assert all(
        a is b
        for a, b in zip(
            lists,
            (prepared.models, prepared.optimizers, prepared.schedulers, prepared.dataloaders),
            strict=True,
        )
    )


def test_the_accelerator_records_what_it_prepares_in_its_registry() -> None:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 1)
    loader = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=2)
    model, optimizer, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), loader)
    registry = accelerator._prepared
    assert (
        registry.models == [model] and registry.optimizers == [optimizer] and registry.dataloaders == [loader]
    )
    accelerator.free_memory()
    assert registry.models == [] and registry.dataloaders == []
