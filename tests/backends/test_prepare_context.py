"""``PrepareContext``: a strategy that prepares objects together is driven by a context built by hand,
without an Accelerator (DeepSpeed's checks and batch size need no engine)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from accelerate.backends.base import PrepareContext
from accelerate.backends.deepspeed.strategy import DeepSpeedStrategy, _micro_batch_size
from accelerate.backends.registry import Prepared


def _context(loaders: list[tuple[Any, bool | None]], **values: Any) -> PrepareContext:
    def prepare_data_loader(loader: Any, placement: bool | None) -> Any:
        loaders.append((loader, placement))
        return loader

    settings: dict[str, Any] = {"num_processes": 2, "split_batches": False, "gradient_accumulation_steps": 1}
    return PrepareContext(
        **(settings | values), precision=None, dynamo_plugin=None, prepare_data_loader=prepare_data_loader
    )


def test_deepspeed_prepares_a_lone_dataloader_through_the_context() -> None:
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=4)
    seen: list[tuple[Any, bool | None]] = []
    joint = DeepSpeedStrategy(torch.device("cpu"), {}).prepare_jointly([loader], [False], _context(seen))
    assert joint.results == [loader] and joint.models == []
    assert seen == [(loader, False)]


def test_deepspeed_refuses_two_models_in_one_call() -> None:
    models = [torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)]
    with pytest.raises(ValueError, match="one model with at most one optimizer"):
        DeepSpeedStrategy(torch.device("cpu"), {}).prepare_jointly(models, [None, None], _context([]))


def test_the_micro_batch_size_reads_the_context_values() -> None:
    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=8)
    assert _micro_batch_size([loader], 2, split_batches=True) == 4
    assert _micro_batch_size([loader], 2, split_batches=False) == 8
    assert _micro_batch_size([], 2, split_batches=False) is None


def test_a_context_without_a_registry_starts_empty() -> None:
    assert _context([]).prepared == Prepared()
