"""Sharding rules checked in one process by building every rank's shard side by side."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader

from accelerate.data_loader import (
    BatchSamplerShard,
    IterableDatasetShard,
    SeedableRandomSampler,
    prepare_data_loader,
)
from tests.data.helpers import Stream, expected_samples, flat, index_loader, single_process_order

COMBOS = list(itertools.product([False, True], repeat=4))  # split, even, drop_last, shuffle


def _shards(
    length: int, bs: int, n: int, split: bool, even: bool, drop_last: bool, shuffle: bool, seed: int = 7
):
    return [
        prepare_data_loader(
            index_loader(length, bs, shuffle=shuffle, drop_last=drop_last),
            num_processes=n,
            process_index=p,
            split_batches=split,
            even_batches=even,
            data_seed=seed,
            device="cpu",
        )
        for p in range(n)
    ]


@pytest.mark.parametrize(("split", "even", "drop_last", "shuffle"), COMBOS)
@pytest.mark.parametrize(("length", "n"), [(23, 2), (23, 3), (5, 2)])
def test_union_is_dataset_plus_documented_duplicates(split, even, drop_last, shuffle, length, n):
    bs = 6 if split else 4
    loaders = _shards(length, bs, n, split, even, drop_last, shuffle)
    per_process = [[flat(b) for b in loader] for loader in loaders]
    for loader, batches in zip(loaders, per_process):
        assert len(batches) == len(loader), "each process's batch count must equal its len()"
    real, dups = expected_samples(length, bs, n, split, even, drop_last)
    seen = Counter(x for batches in per_process for b in batches for x in b)
    assert sum(seen.values()) == real + dups
    order = single_process_order(length, shuffle, 7, 0)
    assert set(seen) == set(order[:real])
    if even or drop_last:
        # Equal batch counts: lay the rounds out as a gather would, then drop the tail.
        assert len({len(b) for b in per_process}) == 1
        gathered = [x for step in zip(*per_process) for b in step for x in b]
        assert gathered[: len(gathered) - dups] == order[:real]
        assert all(loader.remainder == dups for loader in loaders)


@pytest.mark.parametrize("skip", [0, 1, 3])
def test_rank_assignment_and_skip_by_underlying_batches(skip):
    base = BatchSampler(range(10), 2, False)  # 5 batches
    shards = [BatchSamplerShard(base, 2, p) for p in range(2)]
    for shard in shards:
        shard.skip_base_batches = skip
    got = [list(s) for s in shards]
    assert got[0][0] == list(range(2 * skip, 2 * skip + 2))
    # ranks are dealt from the skip point on; padding (skip=0) comes from the epoch's start
    assert got[1][-1] == {0: [0, 1], 1: [8, 9], 3: [8, 9]}[skip]
    assert [len(g) for g in got] == [s.length_after(skip) for s in shards]


def test_even_batches_pads_tiny_dataset_cyclically():
    shards = [list(BatchSamplerShard(BatchSampler(range(3), 4, False), 3, p)) for p in range(3)]
    assert shards == [[[0, 1, 2, 0]], [[1, 2, 0, 1]], [[2, 0, 1, 2]]]


def test_variable_batch_sizes_without_batch_size_attribute():
    batches = [[0], [1, 2], [3, 4, 5]]
    shards = [list(BatchSamplerShard(batches, 2, p)) for p in range(2)]
    assert shards == [[[0], [3, 4, 5]], [[1, 2], [0]]]


def test_seedable_sampler_depends_only_on_seed_and_epoch():
    a, b = SeedableRandomSampler(range(50), data_seed=3), SeedableRandomSampler(range(50), data_seed=3)
    torch.manual_seed(999)  # the global RNG must not matter
    assert list(a) == list(b)
    a.set_epoch(1)
    b.set_epoch(0)
    assert list(a) != list(b)
    b.set_epoch(1)
    a.set_epoch(1)
    assert list(a) == list(b) and sorted(a) == list(range(50))


def test_seedable_sampler_moves_to_the_next_epoch_after_a_complete_pass():
    """As upstream's: a plain DataLoader over it reshuffles each epoch (epoch e is seed + e)."""
    sampler = SeedableRandomSampler(range(12), data_seed=8)
    first, second = list(sampler), list(sampler)
    assert first == _upstream_order(8, 0, 12) and second == _upstream_order(8, 1, 12)
    partial = iter(sampler)
    next(partial)
    assert sampler.epoch == 2  # an unfinished pass leaves the epoch alone
    assert list(sampler) == _upstream_order(8, 2, 12) and sampler.epoch == 3
    with_replacement = SeedableRandomSampler(range(5), replacement=True, num_samples=12, data_seed=1)
    assert len(list(with_replacement)) == 12
    more = SeedableRandomSampler(range(5), num_samples=12, data_seed=1)
    assert sorted(list(more)[:10]) == sorted(list(range(5)) * 2)


def _upstream_order(seed: int, epoch: int, size: int) -> list[int]:
    """Upstream's rule for epoch ``epoch``: a generator seeded with seed + epoch, one randperm."""
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(size, generator=generator).tolist()


def test_seedable_sampler_shuffles_as_upstream_seed_plus_epoch():
    sampler = SeedableRandomSampler(range(37), data_seed=1234)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        assert list(sampler) == _upstream_order(1234, epoch, 37), epoch
    # Through a prepared loader (data_seed turns the seedable sampler on): three epochs in a row.
    loader = prepare_data_loader(
        index_loader(37, 5, shuffle=True), num_processes=1, process_index=0, data_seed=1234
    )
    for epoch in range(3):
        assert [x for b in loader for x in flat(b)] == _upstream_order(1234, epoch, 37), epoch
    # A user generator only chooses the seed, and comes back unchanged.
    generator = torch.Generator().manual_seed(5)
    state = generator.get_state()
    seeded = SeedableRandomSampler(range(9), generator=generator)
    seeded.set_epoch(2)
    assert list(seeded) == _upstream_order(5, 2, 9) and torch.equal(generator.get_state(), state)


@pytest.mark.parametrize(("split", "even", "drop_last"), list(itertools.product([False, True], repeat=3)))
def test_iterable_shard_matches_map_rules(split, even, drop_last):
    length, bs, n = 23, 6, 2
    shards = [
        IterableDatasetShard(Stream(length), bs, drop_last, n, p, split_batches=split, even_batches=even)
        for p in range(n)
    ]
    per_process = [list(s) for s in shards]
    for shard, samples in zip(shards, per_process):
        assert len(samples) == len(shard)
    round_size = bs if split else bs * n
    rest = length % round_size
    dups = 0 if (drop_last or not even or rest == 0) else round_size - rest
    real = length - rest if drop_last else length
    assert sum(map(len, per_process)) == real + dups
    assert all(s.last_round_duplicates == dups == s.expected_duplicates() for s in shards)
    if even or drop_last:
        per = shards[0].process_batch_size
        rounds = [
            x
            for r in range(len(per_process[0]) // per)
            for samples in per_process
            for x in samples[r * per : (r + 1) * per]
        ]
        assert rounds[: len(rounds) - dups] == list(range(real))


def test_prepared_iterable_and_already_sharded_iterable():
    loaders = [
        prepare_data_loader(
            DataLoader(Stream(11), batch_size=2), num_processes=2, process_index=p, dispatch_batches=False
        )
        for p in range(2)
    ]
    got = [[flat(b) for b in loader] for loader in loaders]
    assert got == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [10, 0]]]
    assert [len(loader) for loader in loaders] == [3, 3] and loaders[0].remainder == 1
    # A dataset that shards itself is read as it is: never sharded twice, and not dispatched.
    own = [
        prepare_data_loader(
            DataLoader(Stream(7, rank=p, world=2), batch_size=2), num_processes=2, process_index=p
        )
        for p in range(2)
    ]
    assert [[flat(b) for b in loader] for loader in own] == [[[0, 2], [4, 6]], [[1, 3], [5]]]
    assert type(own[0]).__name__ == "DataLoaderShard"


def test_bad_input_errors_name_the_fix():
    with pytest.raises(ValueError, match="not divisible by 2.*split_batches=False"):
        BatchSamplerShard(BatchSampler(range(10), 3, False), 2, 0, split_batches=True)
    with pytest.raises(ValueError, match="not divisible"):
        prepare_data_loader(index_loader(10, 3), num_processes=2, process_index=0, split_batches=True)
    with pytest.raises(ValueError, match="even_batches=False"):
        BatchSamplerShard(iter([[0, 1], [2, 3]]), 2, 0, even_batches=True)
    prepared = prepare_data_loader(index_loader(10, 3), num_processes=2, process_index=0)
    with pytest.raises(ValueError, match="already prepared.*original DataLoader"):
        prepare_data_loader(prepared, num_processes=2, process_index=0)
    with pytest.raises(ValueError, match="process_index"):
        BatchSamplerShard(BatchSampler(range(4), 2, False), 2, 2)


@pytest.mark.parametrize("size", [0, 1, 5, 8, 23, 24, 25])
@pytest.mark.parametrize("batch_size", [1, 3, 4])
@pytest.mark.parametrize("num_processes", [2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("even_batches", [False, True])
def test_indexed_fast_path_matches_generic_rounds(
    size: int, batch_size: int, num_processes: int, drop_last: bool, even_batches: bool
) -> None:
    """The plain-BatchSampler fast path yields exactly what the generic round logic yields."""
    from torch.utils.data import BatchSampler, SequentialSampler

    for skip in range(0, 5):
        for rank in range(num_processes):
            base = BatchSampler(SequentialSampler(range(size)), batch_size, drop_last)
            fast = BatchSamplerShard(base, num_processes, rank, even_batches=even_batches)
            slow = BatchSamplerShard(base, num_processes, rank, even_batches=even_batches)
            fast.skip_base_batches = slow.skip_base_batches = skip
            got = list(fast._iter_rounds_indexed(skip))
            want = list(slow._iter_rounds(skip))
            assert got == want, (skip, rank)
            assert fast.last_round_duplicates == slow.last_round_duplicates


@pytest.mark.parametrize(("replacement", "num_samples"), [(False, None), (False, 30), (False, 7), (True, 12)])
def test_one_pass_is_what_random_sampler_yields(replacement, num_samples):
    """The list fast path draws exactly RandomSampler's order from the same generator state."""
    from torch.utils.data import RandomSampler

    from accelerate.data.shuffle import one_pass

    sampler = RandomSampler(range(13), replacement=replacement, num_samples=num_samples)
    sampler.generator = torch.Generator().manual_seed(3)
    expected = list(sampler)
    sampler.generator = torch.Generator().manual_seed(3)
    assert one_pass(sampler) == expected
