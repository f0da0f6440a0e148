"""Exact resume across an epoch boundary on two processes, with a default `Accelerator`.

A run stopped a few batches into its second epoch and resumed in a fresh set-up (new
`Accelerator`, new prepared loader, another global seed) must yield, on every rank, the rest of
that epoch and then the following epochs exactly as the uninterrupted run did — whether the
position travels through the loader's own ``state_dict`` (with the global RNG restored, as
``load_state`` restores ``random_states_{rank}.pkl``), through ``save_state`` / ``load_state``, or
through ``load_state`` followed by ``skip_first_batches``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.data.helpers import IndexDataset, flat
from tests.helpers.pool import WorkerPool

EPOCHS = 4
STOP_EPOCH = 1  # the second epoch
STOP_BATCH = 3  # batches of it done before stopping


def _expect_exact(rank: int, label: str, done: list[Any], tail: list[Any], expected: list[Any]) -> None:
    """``done + tail`` (interrupted, then resumed) must be ``expected`` batch for batch."""
    assert done == expected[: len(done)], f"rank {rank}: the interrupted run itself differs"
    got = done + tail
    assert len(got) == len(expected), f"rank {rank} ({label}): {len(got)} batches, expected {len(expected)}"
    wrong = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    assert not wrong, f"rank {rank} ({label}): batches {wrong} of {len(expected)} differ after resuming"


def _prepared(length: int, batch_size: int, seed: int, sampler: str) -> tuple[Any, Any]:
    from accelerate import Accelerator
    from accelerate.state import PartialState
    from accelerate.utils import DataLoaderConfiguration

    # "torch": the default (PyTorch's order); "seedable": the (seed, epoch) permutation.
    accelerator = Accelerator(
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=sampler == "seedable")
    )
    torch.manual_seed(seed + PartialState().process_index)  # unsynchronised on purpose
    loader = accelerator.prepare(DataLoader(IndexDataset(length), batch_size=batch_size, shuffle=True))
    return accelerator, loader


def interrupted_on_rank(length: int, batch_size: int, sampler: str, ckpt: str) -> dict[str, Any]:
    """The uninterrupted run's batches, then a second run stopped and saved mid-epoch."""
    from accelerate.state import reset_state

    _, loader = _prepared(length, batch_size, 100, sampler)
    reference = [[flat(b) for b in loader] for _ in range(EPOCHS)]
    reset_state()
    accelerator, loader = _prepared(length, batch_size, 100, sampler)
    done: list[list[int]] = []
    for epoch in range(STOP_EPOCH + 1):
        for step, batch in enumerate(loader):
            done.append(flat(batch))
            if epoch == STOP_EPOCH and step + 1 == STOP_BATCH:
                break
    accelerator.save_state(ckpt)
    return {"reference": reference, "done": done, "state": loader.state_dict(), "rng": torch.get_rng_state()}


def resumed_on_rank(
    length: int,
    batch_size: int,
    sampler: str,
    how: str,
    ckpt: str,
    states: list[dict[str, Any]],
    rngs: list[torch.Tensor],
) -> list[list[int]]:
    """A fresh run (another seed) restored from the interrupted one, iterated to the last epoch."""
    from accelerate.state import PartialState

    rank = PartialState().process_index
    accelerator, loader = _prepared(length, batch_size, 999, sampler)
    if how == "state_dict":
        loader.load_state_dict(states[rank])
        torch.set_rng_state(rngs[rank])  # what load_state does with random_states_{rank}.pkl
    else:
        accelerator.load_state(ckpt)
    batches: list[list[int]] = []
    epochs_left = EPOCHS - STOP_EPOCH
    if how == "skip_first_batches":
        # The view finishes the stopped epoch; the loader itself then goes on with the next one.
        batches += [flat(b) for b in accelerator.skip_first_batches(loader, STOP_BATCH)]
        epochs_left -= 1
    for _ in range(epochs_left):
        batches += [flat(b) for b in loader]
    return batches


@pytest.mark.parametrize("how", ["state_dict", "save_state", "skip_first_batches"])
@pytest.mark.parametrize(
    ("sampler", "length", "batch_size"), [("torch", 32, 2), ("torch", 37, 3), ("seedable", 37, 3)]
)
def test_resume_across_an_epoch_boundary_on_two_processes_is_exact(
    pool2: WorkerPool, tmp_path: Any, how: str, sampler: str, length: int, batch_size: int
) -> None:
    ckpt = str(tmp_path / "ckpt")
    first = pool2.run(interrupted_on_rank, length, batch_size, sampler, ckpt)
    states, rngs = [r["state"] for r in first], [r["rng"] for r in first]
    rest = pool2.run(resumed_on_rank, length, batch_size, sampler, how, ckpt, states, rngs)
    for rank, (run, tail) in enumerate(zip(first, rest)):
        expected = [b for epoch in run["reference"] for b in epoch]
        _expect_exact(rank, f"{sampler}, {how}", run["done"], tail, expected)


def _worker_loader(rank: int, persistent: bool) -> Any:
    from accelerate.data_loader import prepare_data_loader

    loader = DataLoader(
        IndexDataset(32), batch_size=2, shuffle=True, num_workers=2, persistent_workers=persistent
    )
    return prepare_data_loader(loader, num_processes=2, process_index=rank, use_stateful_dataloader=True)


@pytest.mark.parametrize("persistent", [False, True])
def test_resume_with_dataloader_workers_skips_the_done_batches(persistent: bool) -> None:
    """With ``num_workers > 0`` torch calls iter() on the batch sampler twice per iteration (and
    keeps the second): the resume position must reach the iteration actually used. Both ranks of
    a 2-process split are built side by side in this process (the pool's daemonic workers cannot
    start DataLoader workers); without a process group each draws its own order from the seed."""
    for rank in range(2):
        torch.manual_seed(5)
        loader = _worker_loader(rank, persistent)
        expected = [flat(b) for _ in range(EPOCHS) for b in loader]
        torch.manual_seed(5)
        loader = _worker_loader(rank, persistent)
        done: list[list[int]] = []
        for epoch in range(STOP_EPOCH + 1):
            for step, batch in enumerate(loader):
                done.append(flat(batch))
                if epoch == STOP_EPOCH and step + 1 == STOP_BATCH:
                    break
        state, rng = loader.state_dict(), torch.get_rng_state()
        torch.manual_seed(999)
        resumed = _worker_loader(rank, persistent)
        resumed.load_state_dict(state)
        torch.set_rng_state(rng)
        tail = [flat(b) for _ in range(EPOCHS - STOP_EPOCH) for b in resumed]
        _expect_exact(rank, f"workers, persistent={persistent}", done, tail, expected)
