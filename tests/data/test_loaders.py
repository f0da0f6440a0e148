"""The prepared loader in one process: batch types, bookkeeping, skipping and exact resume."""

from __future__ import annotations

import functools

import pytest
import torch
from torch.utils.data import DataLoader

from accelerate.data.metrics import gather_for_metrics
from accelerate.data_loader import DataLoaderShard, prepare_data_loader, skip_first_batches
from accelerate.state import GradientState
from tests.data.helpers import IndexDataset, Pair, Record, Stream, flat, index_loader, single_process_order

# Upstream's default is use_stateful_dataloader=False (only the epoch is restored); these tests resume positions.
stateful_loader = functools.partial(prepare_data_loader, use_stateful_dataloader=True)


def _collate_nested(samples: list[int]) -> dict:
    index = torch.tensor(samples)
    return {
        "pair": Pair(index, index * 2),
        "record": Record(index, [f"s{i}" for i in samples]),
        "list": [index, "label"],
    }


def test_nested_batches_keep_their_types_and_strings():
    loader = DataLoader(IndexDataset(5), batch_size=2, collate_fn=_collate_nested)
    prepared = prepare_data_loader(loader, num_processes=1, process_index=0, device="cpu", put_on_device=True)
    batches = list(prepared)
    assert len(batches) == len(prepared) == 3
    first = batches[0]
    assert isinstance(first["pair"], Pair) and isinstance(first["record"], Record)
    assert first["record"].name == ["s0", "s1"] and first["list"][1] == "label"
    assert torch.equal(first["pair"].double, torch.tensor([0, 2]))


def test_end_of_dataloader_and_gradient_state():
    state = GradientState()
    loader = prepare_data_loader(index_loader(5, 2), num_processes=1, process_index=0, gradient_state=state)
    seen = []
    for _ in loader:
        assert state.active_dataloader is loader
        seen.append((loader.end_of_dataloader, state.end_of_dataloader))
    assert seen == [(False, False), (False, False), (True, True)]
    assert state.active_dataloader is None
    assert loader.total_batch_size == 2 and loader.total_dataset_length == 5
    assert isinstance(loader, DataLoader) and loader.base_dataloader is not None


def test_gather_for_metrics_single_process_is_identity():
    state = GradientState()
    loader = prepare_data_loader(index_loader(5, 2), num_processes=1, process_index=0, gradient_state=state)
    out = [gather_for_metrics(b, gradient_state=state, num_processes=1) for b in loader]
    assert torch.cat(out).tolist() == list(range(5))


def test_batch_size_none_keeps_sample_semantics():
    loader = DataLoader(IndexDataset(4), batch_size=None)
    prepared = prepare_data_loader(loader, num_processes=2, process_index=1)
    assert [int(x) for x in prepared] == [1, 3]


def test_set_epoch_and_new_iterations_reshuffle():
    loader = prepare_data_loader(
        index_loader(20, 5, shuffle=True), num_processes=1, process_index=0, data_seed=1
    )
    epoch0 = [flat(b) for b in loader]
    epoch1 = [flat(b) for b in loader]
    assert epoch0 != epoch1 and loader.iteration == 2
    loader.set_epoch(0)
    assert [flat(b) for b in loader] == epoch0
    # An abandoned iteration still counts as an epoch, like a fresh DataLoader iterator would.
    next(iter(loader))
    loader.set_epoch(5)
    assert loader.iteration == 5


def test_skip_first_batches_views_and_errors():
    prepared = prepare_data_loader(
        index_loader(10, 2, shuffle=True), num_processes=1, process_index=0, data_seed=4
    )
    full = [flat(b) for b in prepared]  # epoch 0
    prepared.set_epoch(0)
    view = skip_first_batches(prepared, 3)
    assert len(view) == 2 and [flat(b) for b in view] == full[3:]
    assert prepared.iteration == 1  # finishing the view moved the loader on
    with pytest.raises(ValueError, match="past the end.*num_batches <= 5"):
        skip_first_batches(prepared, 6)
    assert list(skip_first_batches(prepared, 5)) == []
    plain = index_loader(7, 2)
    assert [flat(b) for b in skip_first_batches(plain, 2)] == [[4, 5], [6]]
    stream = DataLoader(IterableDatasetNoLen(), batch_size=2)
    assert [flat(b) for b in skip_first_batches(stream, 1)] == [[2, 3], [4]]


class IterableDatasetNoLen(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    def __iter__(self):
        yield from range(5)


def _run(loader: DataLoaderShard, epochs: int) -> list[list[int]]:
    return [flat(b) for _ in range(epochs) for b in loader]


@pytest.mark.parametrize("seedable", [True, False])
@pytest.mark.parametrize(("stop_epoch", "stop_batch"), [(1, 2), (0, 5), (1, 6), (0, None)])
def test_resume_in_one_process_is_exact(seedable, stop_epoch, stop_batch):
    """Stop after ``stop_batch`` batches of ``stop_epoch`` (None: after the epoch's loop), resume afresh."""

    def make():
        return stateful_loader(
            index_loader(23, 4, shuffle=True), num_processes=1, process_index=0, use_seedable_sampler=seedable
        )

    torch.manual_seed(0)
    reference = _run(make(), 3)
    torch.manual_seed(0)
    first = make()
    done: list[list[int]] = []
    for epoch in range(stop_epoch + 1):
        for step, batch in enumerate(first):
            done.append(flat(batch))
            if epoch == stop_epoch and step + 1 == stop_batch:
                break
    state = first.state_dict()
    torch.manual_seed(12345)  # the resumed process's global RNG differs, and is not restored:
    resumed = make()  # the loader's state alone decides the current and the later epochs' order
    resumed.load_state_dict(state)
    rest = [flat(b) for _ in range(state["epoch"], 3) for b in resumed]
    assert done + rest == reference


def test_resume_old_style_skip_after_load_skips_once():
    torch.manual_seed(3)
    loader = prepare_data_loader(index_loader(20, 4, shuffle=True), num_processes=1, process_index=0)
    reference = _run(loader, 2)
    torch.manual_seed(3)
    loader = prepare_data_loader(index_loader(20, 4, shuffle=True), num_processes=1, process_index=0)
    list(loader)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    assert state["epoch"] == 1 and state["batches_yielded"] == 2
    fresh = prepare_data_loader(index_loader(20, 4, shuffle=True), num_processes=1, process_index=0)
    fresh.load_state_dict(state)
    assert [flat(b) for b in skip_first_batches(fresh, 2)] == reference[7:]


def test_state_dict_at_the_last_batch_points_to_next_epoch():
    loader = prepare_data_loader(index_loader(6, 2), num_processes=1, process_index=0)
    for _ in loader:
        state = loader.state_dict()
    assert (state["epoch"], state["batches_yielded"]) == (1, 0)
    bad = dict(state, split_batches=True)
    with pytest.raises(ValueError, match="split_batches"):
        loader.load_state_dict(bad)
    with pytest.raises(KeyError, match="state_dict"):
        loader.load_state_dict({"epoch": 1})


def test_mid_epoch_state_is_resplit_for_another_process_count():
    def shards(n):
        return [
            stateful_loader(index_loader(30, 3, shuffle=True), num_processes=n, process_index=p, data_seed=5)
            for p in range(n)
        ]

    two = shards(2)
    iterators = [iter(loader) for loader in two]
    done = [x for _ in range(2) for it in iterators for x in flat(next(it))]  # 2 steps = 4 batches
    state = two[0].state_dict()
    assert state["base_batches_consumed"] == 4
    three = shards(3)
    for loader in three:
        loader.load_state_dict(state)
    rest = [x for step in zip(*[list(loader) for loader in three]) for b in step for x in flat(b)]
    assert done + rest == single_process_order(30, True, 5, 0)


def test_iterable_mid_epoch_state_with_other_process_count_is_refused():
    loaders = [
        stateful_loader(
            DataLoader(Stream(9), batch_size=2), num_processes=2, process_index=p, dispatch_batches=False
        )
        for p in range(2)
    ]
    it = iter(loaders[0])
    next(it)
    state = loaders[0].state_dict()
    other = stateful_loader(DataLoader(Stream(9), batch_size=2), num_processes=1, process_index=0)
    with pytest.raises(ValueError, match="same number of processes"):
        other.load_state_dict(state)
    same = stateful_loader(
        DataLoader(Stream(9), batch_size=2), num_processes=2, process_index=0, dispatch_batches=False
    )
    same.load_state_dict(state)
    assert [flat(b) for b in same] == [[4, 5], [8, 0]]


def test_restored_position_past_the_end_is_a_clear_error():
    loader = stateful_loader(index_loader(6, 2), num_processes=1, process_index=0)
    loader.load_state_dict({"epoch": 0, "batches_yielded": 5, "num_processes": 1})
    with pytest.raises(ValueError, match="past the end"):
        list(loader)


def test_worker_processes_keep_order_and_duplicate_count():
    map_loader = DataLoader(IndexDataset(7), batch_size=2, num_workers=2, collate_fn=_collate_nested)
    prepared = [prepare_data_loader(map_loader, num_processes=2, process_index=p) for p in range(2)]
    assert [[flat(b["pair"].index) for b in loader] for loader in prepared] == [
        [[0, 1], [4, 5]],
        [[2, 3], [6, 0]],
    ]
    assert prepared[1].remainder == 1
    stream = [
        prepare_data_loader(
            DataLoader(Stream(7), batch_size=2, num_workers=1),
            num_processes=2,
            process_index=p,
            dispatch_batches=False,
        )
        for p in range(2)
    ]
    assert [[flat(b) for b in loader] for loader in stream] == [[[0, 1], [4, 5]], [[2, 3], [6, 0]]]
    assert stream[0].remainder == 1  # the shard ran in a worker: counted from the dataset's length


@pytest.mark.parametrize("even_batches", [True, False])
def test_iterable_shard_in_several_workers_neither_duplicates_nor_reorders(even_batches: bool):
    def epoch(workers: int) -> list[list[list[int]]]:
        loaders = [
            prepare_data_loader(
                DataLoader(Stream(11), batch_size=2, num_workers=workers),
                num_processes=2,
                process_index=p,
                dispatch_batches=False,
                even_batches=even_batches,
            )
            for p in range(2)
        ]
        return [[flat(b) for b in loader] for loader in loaders]

    assert epoch(2) == epoch(0)


@pytest.mark.parametrize("seed", [0, 7])
def test_default_shuffle_starts_in_pytorch_order_and_leaves_the_global_rng_as_pytorch(seed):
    """One process: the first epoch is exactly what DataLoader(shuffle=True) yields under the same
    torch.manual_seed, later epochs are reshuffled, and the global RNG ends where PyTorch leaves it."""
    torch.manual_seed(seed)
    prepared = prepare_data_loader(index_loader(23, 4, shuffle=True), num_processes=1, process_index=0)
    got = [[flat(b) for b in prepared] for _ in range(3)]
    got_rng = torch.rand(2)
    torch.manual_seed(seed)
    plain_loader = index_loader(23, 4, shuffle=True)
    plain = [[flat(b) for b in plain_loader] for _ in range(3)]
    assert got[0] == plain[0] and got[0] != got[1] != got[2]
    assert torch.equal(got_rng, torch.rand(2))


def test_default_shuffle_later_epochs_follow_from_the_first_draw_not_the_global_rng():
    """Only the first epoch reads the global RNG: what it holds later does not change the order."""

    def epochs(reseed_between: bool) -> list[list[list[int]]]:
        torch.manual_seed(4)
        loader = prepare_data_loader(index_loader(23, 4, shuffle=True), num_processes=1, process_index=0)
        out = []
        for epoch in range(3):
            if reseed_between and epoch:
                torch.manual_seed(100 + epoch)
            out.append([flat(b) for b in loader])
        return out

    assert epochs(False)[1:] == epochs(True)[1:]


@pytest.mark.parametrize("kind", ["shard", "dispatcher", "skip"])
def test_directly_built_loader_has_a_plain_base_dataloader(kind: str) -> None:
    from accelerate.data_loader import DataLoaderDispatcher, DataLoaderStateMixin, SkipDataLoader

    loader: DataLoader = {  # type: ignore[type-arg]
        "shard": lambda: DataLoaderShard(range(16), batch_size=4),
        "dispatcher": lambda: DataLoaderDispatcher(range(16), batch_size=4),
        "skip": lambda: SkipDataLoader(range(16), batch_size=4, skip_batches=2),
    }[kind]()
    assert isinstance(loader, DataLoader) and isinstance(loader, DataLoaderStateMixin)
    base = loader.base_dataloader  # type: ignore[attr-defined]
    assert type(base) is DataLoader and loader.base_dataloader is base  # type: ignore[attr-defined]
    assert [batch.tolist() for batch in base] == [list(range(i, i + 4)) for i in range(0, 16, 4)]
    assert GradientState().active_dataloader is None  # the plain loader tells no one


@pytest.mark.parametrize("name", ["DataLoaderShard", "DataLoaderDispatcher", "SkipDataLoader"])
def test_base_dataloader_is_not_a_class_attribute(name: str) -> None:
    import accelerate.data_loader as module

    with pytest.raises(AttributeError):
        _ = getattr(module, name).base_dataloader


def test_prepared_loader_base_dataloader_is_the_loader_given() -> None:
    given = index_loader(8, 2)
    prepared = prepare_data_loader(given, num_processes=1, process_index=0)
    assert prepared.base_dataloader is given
    assert skip_first_batches(prepared, 1).base_dataloader is given
