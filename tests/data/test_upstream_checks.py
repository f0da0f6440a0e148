"""Upstream's own 2-process data checks, run against ours.

* Training with a seedable sampler on 2 processes ends with the model that the same training on
  one process (the whole global batch per step, the same seeded order, no accelerate) ends with.
* ``gather_for_metrics`` over an epoch of a loader built with ``batch_sampler=BatchSampler(...)``
  (or ``sampler=BatchSampler(...)``) returns every sample exactly once, even though every process
  seeds its global RNG differently (as upstream's check does).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler
from torch.utils.data.dataloader import default_collate

from tests.helpers.pool import WorkerPool

EPOCHS, PER_PROCESS_BATCH = 3, 8


def _baseline_loader(dataset: Any, generator: torch.Generator, batch_size: int) -> DataLoader:  # type: ignore[type-arg]
    from accelerate.data_loader import SeedableRandomSampler

    sampler = SeedableRandomSampler(data_source=dataset, num_samples=len(dataset), generator=generator)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)


def _fit(loader: Any, model: Any, optimizer: Any, backward: Any) -> None:
    for _ in range(EPOCHS):
        for batch in loader:
            model.zero_grad()
            backward(torch.nn.functional.mse_loss(model(batch["x"]), batch["y"]))
            optimizer.step()


def seedable_training_on_rank(split_batches: bool) -> dict[str, list[float]]:
    """One process's plain training on the global batch, then the prepared training on all."""
    from accelerate import Accelerator
    from accelerate.state import PartialState
    from accelerate.test_utils import RegressionDataset, RegressionModel
    from accelerate.utils import DataLoaderConfiguration, set_seed

    world = PartialState().num_processes
    generator = torch.Generator()
    set_seed(42)
    generator.manual_seed(42)
    dataset = RegressionDataset(length=PER_PROCESS_BATCH * 4 * world, seed=42)
    baseline = RegressionModel()
    optimizer = torch.optim.SGD(baseline.parameters(), lr=0.1)
    plain = _baseline_loader(dataset, generator, PER_PROCESS_BATCH * world)  # the global batch, no accelerate
    _fit(plain, baseline, optimizer, lambda loss: loss.backward())

    config = DataLoaderConfiguration(split_batches=split_batches, use_seedable_sampler=True)
    accelerator = Accelerator(cpu=True, dataloader_config=config)
    batch_size = PER_PROCESS_BATCH * world if split_batches else PER_PROCESS_BATCH
    loader = _baseline_loader(dataset, generator, batch_size)
    model = RegressionModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader, model, optimizer = accelerator.prepare(loader, model, optimizer)
    set_seed(42)
    generator.manual_seed(42)
    _fit(loader, model, optimizer, accelerator.backward)
    trained = accelerator.unwrap_model(model).cpu()
    return {
        "baseline": [baseline.a.item(), baseline.b.item()],
        "prepared": [trained.a.item(), trained.b.item()],
    }


def both_seedable_trainings_on_rank() -> dict[bool, dict[str, list[float]]]:
    from accelerate.state import reset_state

    results = {}
    for split_batches in (False, True):
        results[split_batches] = seedable_training_on_rank(split_batches)
        reset_state()
    return results


def test_seedable_training_on_two_processes_ends_with_the_one_process_model(pool2: WorkerPool) -> None:
    runs = pool2.run(both_seedable_trainings_on_rank)  # one call: the suite's time is tight
    for split_batches in (False, True):
        for rank, result in enumerate(run[split_batches] for run in runs):
            assert torch.allclose(torch.tensor(result["prepared"]), torch.tensor(result["baseline"])), (
                f"split_batches={split_batches}, rank {rank}: did not obtain the same model "
                f"({result['prepared']} vs one process's {result['baseline']})"
            )


class _Indexed(Dataset):  # type: ignore[type-arg]
    """22 samples; indexed with one index or, as a BatchSampler given as ``sampler`` does, a list."""

    def __len__(self) -> int:
        return 22

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, int):
            return {"index": i, "label": i % 3}
        return [self[j] for j in i]


def gathered_epoch_on_rank(kind: str) -> list[int]:
    from accelerate import Accelerator
    from accelerate.state import PartialState

    accelerator = Accelerator(cpu=True)
    torch.manual_seed(PartialState().process_index)  # each process draws differently, on purpose
    batches = BatchSampler(RandomSampler(_Indexed()), batch_size=4, drop_last=False)
    if kind == "batch_sampler":
        loader = DataLoader(_Indexed(), batch_sampler=batches)
    else:
        loader = DataLoader(_Indexed(), sampler=batches, batch_size=None, collate_fn=default_collate)
    loader = accelerator.prepare(loader)
    seen: list[int] = []
    for batch in loader:
        index, _ = accelerator.gather_for_metrics((batch["index"], batch["label"]))
        seen += index.tolist()
    return seen


def test_gather_for_metrics_over_a_batch_sampler_loader_returns_each_sample_once(pool2: WorkerPool) -> None:
    for kind in ("batch_sampler", "sampler"):
        for rank, seen in enumerate(pool2.run(gathered_epoch_on_rank, kind)):
            assert sorted(seen) == list(range(22)), (
                f"{kind}=BatchSampler(...), rank {rank}: gathered {sorted(seen)}"
            )
