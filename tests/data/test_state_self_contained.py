"""A prepared loader's own ``state_dict`` alone decides every later epoch's order.

The regression, step by step as reported: two CPU processes, ``set_seed(1234)``, a default
``Accelerator(cpu=True)``, a prepared ``DataLoader(64 samples, batch_size=4, shuffle=True)``; the
whole first epoch and 3 batches of the second, then ``loader.state_dict()`` per rank and the next
8 batches (the rest of epoch 2 and 3 batches of epoch 3). A fresh run (``set_seed(1234)``, a new
``Accelerator``, the same loader) loads the saved state — without restoring torch's global RNG —
and must yield those 8 batches on every rank. Epoch 3 used to be drawn from the global RNG, which
the resumed run does not share, so 10 of the 16 batches matched.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from tests.data.helpers import IndexDataset, flat
from tests.helpers.pool import WorkerPool

LENGTH, BATCH_SIZE, DONE_IN_SECOND_EPOCH, RECORDED = 64, 4, 3, 8


def _prepared(sampler: str) -> Any:
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, set_seed

    set_seed(1234)
    config = DataLoaderConfiguration(use_seedable_sampler=sampler == "seedable")
    accelerator = Accelerator(cpu=True, dataloader_config=config)
    return accelerator.prepare(DataLoader(IndexDataset(LENGTH), batch_size=BATCH_SIZE, shuffle=True))


def saved_then_recorded(sampler: str, count: int = RECORDED) -> dict[str, Any]:
    """Epoch 1, 3 batches of epoch 2, the state; then the next ``count`` batches."""
    loader = _prepared(sampler)
    for _ in loader:
        pass
    iterator = iter(loader)
    for _ in range(DONE_IN_SECOND_EPOCH):
        next(iterator)
    state = loader.state_dict()
    recorded = [flat(batch) for batch in iterator]
    for batch in loader:
        if len(recorded) == count:
            break
        recorded.append(flat(batch))
    return {"state": state, "recorded": recorded}


def resumed(sampler: str, states: list[dict[str, Any]], count: int = RECORDED) -> list[list[int]]:
    """A fresh run that loads its rank's state (and nothing else) and reads ``count`` batches."""
    from accelerate.state import PartialState

    loader = _prepared(sampler)
    loader.load_state_dict(states[PartialState().process_index])
    got: list[list[int]] = []
    while len(got) < count:
        for batch in loader:
            got.append(flat(batch))
            if len(got) == count:
                break
    return got


def _matching(first: list[dict[str, Any]], rest: list[list[list[int]]]) -> tuple[int, int]:
    pairs = [(a, b) for run, tail in zip(first, rest) for a, b in zip(run["recorded"], tail)]
    return sum(a == b for a, b in pairs), len(pairs)


def test_loader_state_alone_resumes_the_following_epochs_on_two_processes(pool2: WorkerPool) -> None:
    for sampler in ("torch", "seedable"):
        first = pool2.run(saved_then_recorded, sampler)
        assert all(len(run["recorded"]) == RECORDED for run in first)
        rest = pool2.run(resumed, sampler, [run["state"] for run in first])
        matched, total = _matching(first, rest)
        assert matched == total == 2 * RECORDED, f"{sampler}: {matched} of {total} batches match"


def test_loader_state_alone_resumes_the_following_epochs_on_one_process() -> None:
    """The same on one process, over an epoch boundary too (16 batches an epoch: record 16)."""
    from accelerate.state import reset_state

    first = saved_then_recorded("torch", 16)
    reset_state()
    torch.manual_seed(99)  # whatever the global RNG holds
    rest = resumed("torch", [first["state"]], 16)
    assert rest == first["recorded"]
