"""The loader's position is a count of global samples: a checkpoint saved mid-epoch by 2 processes
resumes on 1 or 4 processes with every sample of the interrupted epoch consumed exactly once.

The 2-process half runs for real (the gloo pool, ``save_state``); the 1-process half loads the same
folder with ``load_state`` in this process; the 4-process half builds the four loaders side by side
here and gives each the saved loader state (without a process group each replays the saved shuffle
state, exactly as four real processes would after agreeing on process 0's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.data.helpers import IndexDataset
from tests.helpers.pool import WorkerPool

LENGTH, BATCH = 54, 3  # 18 underlying batches: 9 steps on 2 processes
STOP = 3  # steps done on 2 processes: position 18 samples = 6 batches, not a multiple of 4


def _loader() -> DataLoader:  # type: ignore[type-arg]
    return DataLoader(IndexDataset(LENGTH), batch_size=BATCH, shuffle=True)


def save_mid_epoch(ckpt: str) -> dict[str, Any]:
    """On each of 2 ranks: STOP steps of the epoch, then save_state; returns the ids and the RNG."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, set_seed

    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    set_seed(0)
    loader = accelerator.prepare(_loader())
    ids: list[int] = []
    for step, batch in enumerate(loader):
        ids += batch.tolist()
        if step + 1 == STOP:
            break
    state = loader.state_dict()
    accelerator.save_state(ckpt)
    return {"ids": ids, "state": state, "rng": torch.get_rng_state()}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    from tests.conftest import get_pool

    pool: WorkerPool = get_pool(2)
    ckpt = tmp_path_factory.mktemp("elastic") / "ckpt"
    return ckpt, pool.run(save_mid_epoch, str(ckpt))


def _check_exactly_once(phases: list[list[int]]) -> None:
    seen = [i for phase in phases for i in phase]
    repeated = sorted({i for i in seen if seen.count(i) > 1})
    missing = sorted(set(range(LENGTH)) - set(seen))
    assert not repeated and not missing, f"repeated {repeated}, skipped {missing}"


def test_the_saved_position_counts_global_samples(saved: tuple[Path, list[dict[str, Any]]]) -> None:
    _, ranks = saved
    for result in ranks:
        state = result["state"]
        assert state["samples_consumed"] == STOP * 2 * BATCH
        assert state["base_batches_consumed"] == STOP * 2


def test_two_processes_saved_one_process_finishes_the_epoch(saved: tuple[Path, list[dict[str, Any]]]) -> None:
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, set_seed

    ckpt, ranks = saved
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    set_seed(1234)  # a different seed: the order must come from the checkpoint, not from here
    loader = accelerator.prepare(_loader())
    accelerator.load_state(str(ckpt))
    # Process 0's random generators come back (process 1's file has no process to go to).
    assert torch.equal(torch.get_rng_state(), ranks[0]["rng"])
    rest = [i for batch in loader for i in batch.tolist()]
    _check_exactly_once([ranks[0]["ids"], ranks[1]["ids"], rest])
    assert len(rest) == LENGTH - STOP * 2 * BATCH
    assert loader.iteration == 1  # the epoch finished: the next iteration is the next epoch


def test_two_processes_saved_four_processes_finish_the_epoch(
    saved: tuple[Path, list[dict[str, Any]]],
) -> None:
    from accelerate.data_loader import prepare_data_loader

    _, ranks = saved
    state = ranks[0]["state"]
    rest: list[list[int]] = []
    duplicates = 0
    for rank in range(4):
        torch.manual_seed(99 + rank)  # each new process draws differently; the saved state decides
        loader = prepare_data_loader(
            _loader(), num_processes=4, process_index=rank, use_stateful_dataloader=True
        )
        loader.load_state_dict(state)
        rest.append([i for batch in loader for i in batch.tolist()])
        duplicates = loader.remainder
    # 12 underlying batches were left: three rounds of 4 starting 6 batches in (not a round
    # boundary at the new size), so no round needed padding.
    assert duplicates == 0
    assert [len(r) for r in rest] == [3 * BATCH] * 4
    _check_exactly_once([ranks[0]["ids"], ranks[1]["ids"], *rest])


def test_a_position_inside_a_batch_of_the_new_loader_raises() -> None:
    from accelerate.data_loader import prepare_data_loader

    loader = prepare_data_loader(_loader(), num_processes=1, process_index=0, use_stateful_dataloader=True)
    state = loader.state_dict() | {
        "epoch": 0,
        "batches_yielded": 2,
        "samples_consumed": 7,
        "num_processes": 2,
    }
    with pytest.raises(ValueError, match="7 samples into epoch 0, which is inside a batch"):
        loader.load_state_dict(state)
