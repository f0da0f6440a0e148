"""join_uneven_inputs: DDP training where one process has fewer batches finishes without hanging."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from tests.helpers.pool import WorkerPool


def _uneven_training(even_batches: bool | None) -> dict[str, object]:
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # 5 samples, batch 1: rank 0 gets 3 batches, rank 1 gets 2 unless even_batches completes the round.
    loader = DataLoader(TensorDataset(torch.randn(5, 4), torch.randn(5, 1)), batch_size=1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    steps = 0
    with accelerator.join_uneven_inputs([model], even_batches=even_batches):
        inside = loader.batch_sampler.even_batches
        for x, y in loader:
            optimizer.zero_grad()
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            steps += 1
    return {"steps": steps, "even_inside": inside, "even_after": loader.batch_sampler.even_batches}


def test_uneven_inputs_finish_on_both_ranks(pool2: WorkerPool) -> None:
    results = pool2.run(_uneven_training, False)
    assert [r["steps"] for r in results] == [3, 2]
    assert all(r["even_inside"] is False and r["even_after"] is True for r in results)
    assert [r["steps"] for r in pool2.run(_uneven_training, None)] == [3, 3]


def test_one_process_runs_the_block_as_it_is() -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    with accelerator.join_uneven_inputs([model]):
        model(torch.ones(1, 2))
    with (
        pytest.warns(UserWarning, match="no effect in one process"),
        accelerator.join_uneven_inputs([model], even_batches=False),
    ):
        pass
