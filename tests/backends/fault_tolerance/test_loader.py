"""The committed-position loader in a replica group of several processes: each takes its part."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accelerate import FaultToleranceKwargs
from accelerate.backends.fault_tolerance.loader import CommittedBatchLoader
from accelerate.backends.fault_tolerance.runtime import Runtime


def _loader(rank: int, size: int, batch_size: int = 4, samples: int = 10) -> CommittedBatchLoader:
    dataset = TensorDataset(torch.arange(samples))
    runtime = Runtime(FaultToleranceKwargs(num_replica_groups=2), group_rank=rank, group_size=size)
    return CommittedBatchLoader(
        DataLoader(dataset, batch_size=batch_size), runtime, device=torch.device("cpu")
    )


def test_the_processes_of_a_group_split_the_groups_batch_in_contiguous_parts() -> None:
    order = list(range(10))
    parts = [_loader(rank, 2).batch(1, order)[0].tolist() for rank in range(2)]
    assert parts == [[4, 5], [6, 7]]  # batch 1 is samples 4..7, the group's batch
    last = [_loader(rank, 2).batch(2, order)[0].tolist() for rank in range(2)]
    assert last == [[8], [9]]  # the short last batch splits as evenly as it can
    assert _loader(0, 1).batch(1, order)[0].tolist() == [4, 5, 6, 7]  # a group of one takes it all
    assert len(_loader(1, 2)) == 3  # the epoch counts the group's batches, whatever the group's size


def test_a_batch_smaller_than_the_group_is_refused_naming_the_fix() -> None:
    with pytest.raises(ValueError, match=r"batch_size \(2\).*3 processes"):
        _loader(0, 3, batch_size=2)


def test_a_group_rank_outside_the_group_is_refused() -> None:
    with pytest.raises(ValueError, match="group_rank=2"):
        Runtime(FaultToleranceKwargs(), group_rank=2, group_size=2)
