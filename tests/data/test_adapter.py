"""DataLoaderAdapter, DataLoaderStateMixin, get_sampler/set_sampler, MpDeviceLoaderWrapper."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

from accelerate.data_loader import (
    DataLoaderAdapter,
    DataLoaderDispatcher,
    DataLoaderShard,
    DataLoaderStateMixin,
    MpDeviceLoaderWrapper,
    get_sampler,
    prepare_data_loader,
    skip_first_batches,
)
from accelerate.state import GradientState
from accelerate.utils.errors import NotAvailableYetError
from tests.data.helpers import IndexDataset, Stream


def _batches(loader: Any) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


# --- DataLoaderAdapter ---------------------------------------------------------------------------------
def test_adapter_without_state_is_a_plain_loader_that_refuses_to_save() -> None:
    adapter = DataLoaderAdapter(IndexDataset(7), batch_size=3)
    assert _batches(adapter) == [[0, 1, 2], [3, 4, 5], [6]]
    assert len(adapter) == 3 and adapter.batch_size == 3 and type(adapter.base_dataloader) is DataLoader
    assert adapter.state_provider is None
    with pytest.raises(ValueError, match="use_stateful_dataloader=True"):
        adapter.state_dict()
    with pytest.raises(ValueError, match="use_stateful_dataloader=True"):
        adapter.load_state_dict({})


def test_adapter_with_state_resumes_exactly_where_it_stopped() -> None:
    torch.manual_seed(3)
    reference = _batches(DataLoader(IndexDataset(11), batch_size=2, shuffle=True))
    torch.manual_seed(3)
    adapter = DataLoaderAdapter(IndexDataset(11), use_stateful_dataloader=True, batch_size=2, shuffle=True)
    assert adapter.state_provider == "accelerate"  # torchdata is not installed here
    iterator = iter(adapter)
    first = [next(iterator).tolist() for _ in range(3)]
    state = adapter.state_dict()
    assert first == reference[:3]  # the same order as torch's DataLoader with the same seed
    resumed = DataLoaderAdapter(IndexDataset(11), use_stateful_dataloader=True, batch_size=2, shuffle=True)
    torch.manual_seed(999)  # the global RNG does not decide the resumed order: the saved state does
    resumed.load_state_dict(state)
    assert _batches(resumed) == reference[3:]


def test_adapter_with_state_on_an_iterable_dataset() -> None:
    adapter = DataLoaderAdapter(Stream(7), use_stateful_dataloader=True, batch_size=2)
    iterator = iter(adapter)
    next(iterator)
    state = adapter.state_dict()
    resumed = DataLoaderAdapter(Stream(7), use_stateful_dataloader=True, batch_size=2)
    resumed.load_state_dict(state)
    assert _batches(resumed) == [[2, 3], [4, 5], [6]]


def test_adapter_takes_a_batch_sampler_and_exposes_its_sampler() -> None:
    sampler = BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=True)
    adapter = DataLoaderAdapter(IndexDataset(5), batch_sampler=sampler)
    assert _batches(adapter) == [[0, 1], [2, 3]]
    assert adapter.get_sampler() is sampler.sampler and adapter.adjust_state_dict_for_prefetch() is None


def test_adapter_explains_torchdata_only_arguments() -> None:
    with pytest.raises(TypeError, match="pip install torchdata"):
        DataLoaderAdapter(IndexDataset(3), use_stateful_dataloader=True, snapshot_every_n_steps=2)


# --- DataLoaderStateMixin ------------------------------------------------------------------------------
class _CustomLoader(DataLoaderStateMixin):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        self.begin()
        try:
            for i in range(self.n):
                if i == self.n - 1:
                    self.end_of_dataloader = True
                    self.remainder = 0
                yield i
        finally:
            self.end()


def test_state_mixin_tells_gradient_state_about_a_custom_loader() -> None:
    gradient_state = GradientState()
    loader = _CustomLoader(3)
    seen = []
    for i in loader:
        seen.append((i, gradient_state.active_dataloader is loader, gradient_state.end_of_dataloader))
    assert seen == [(0, True, False), (1, True, False), (2, True, True)]
    assert gradient_state.active_dataloader is None and loader.remainder == 0
    loader.reset()
    assert loader.end_of_dataloader is False and loader.remainder == -1


def test_prepared_loaders_are_state_mixins() -> None:
    prepared = prepare_data_loader(
        DataLoader(IndexDataset(4), batch_size=2), num_processes=1, process_index=0
    )
    assert isinstance(prepared, DataLoaderStateMixin) and isinstance(prepared, DataLoaderShard)
    state = GradientState()
    for _ in prepared:
        assert state.active_dataloader is prepared
    assert state.active_dataloader is None and prepared.remainder == 0


# --- samplers ---------------------------------------------------------------------------------------------
def test_get_sampler_finds_the_index_sampler() -> None:
    plain = DataLoader(IndexDataset(6), batch_size=2, shuffle=True)
    assert isinstance(get_sampler(plain), RandomSampler)
    unbatched = DataLoader(IndexDataset(6), batch_size=None)
    assert isinstance(get_sampler(unbatched), SequentialSampler)
    batches_as_samples = DataLoader(
        IndexDataset(6), sampler=BatchSampler(SequentialSampler(range(6)), 2, False)
    )
    assert isinstance(get_sampler(batches_as_samples), SequentialSampler)
    prepared = prepare_data_loader(plain, num_processes=2, process_index=1)
    assert (
        isinstance(prepared.get_sampler(), RandomSampler) and get_sampler(prepared) is prepared.get_sampler()
    )
    assert get_sampler(skip_first_batches(prepared, 1)) is prepared.get_sampler()


class _Backwards(SequentialSampler):  # type: ignore[type-arg]
    def __iter__(self) -> Iterator[int]:
        return iter(reversed(range(len(self.data_source))))


def test_set_sampler_changes_the_order_of_a_prepared_loader() -> None:
    prepared = prepare_data_loader(
        DataLoader(IndexDataset(4), batch_size=2), num_processes=1, process_index=0
    )
    prepared.set_sampler(_Backwards(range(4)))
    assert _batches(prepared) == [[3, 2], [1, 0]]
    dispatcher = prepare_data_loader(
        DataLoader(IndexDataset(4), batch_size=2), num_processes=1, process_index=0, dispatch_batches=True
    )
    assert isinstance(dispatcher, DataLoaderDispatcher)
    dispatcher.set_sampler(_Backwards(range(4)))
    assert isinstance(dispatcher.get_sampler(), _Backwards)
    assert _batches(dispatcher) == [[3, 2], [1, 0]]


def test_set_sampler_on_a_loader_without_batch_sampler_is_refused() -> None:
    from accelerate.data.samplers import set_sampler

    with pytest.raises(ValueError, match="batch_size=None"):
        set_sampler(DataLoader(IndexDataset(3), batch_size=None), SequentialSampler(range(3)))


def test_adjust_state_dict_for_prefetch_changes_nothing() -> None:
    prepared = prepare_data_loader(
        DataLoader(IndexDataset(6), batch_size=2), num_processes=1, process_index=0
    )
    iterator = iter(prepared)
    next(iterator)
    before = prepared.state_dict()
    prepared.adjust_state_dict_for_prefetch()
    after = prepared.state_dict()
    assert (
        before["batches_yielded"] == after["batches_yielded"] == 1
    )  # the batch fetched ahead is not counted


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="torch_xla is installed")
def test_mp_device_loader_wrapper_needs_xla() -> None:
    with pytest.raises(ImportError, match="pip install torch_xla"):
        MpDeviceLoaderWrapper(DataLoader(IndexDataset(2)), torch.device("cpu"))


# --- SkipDataLoader -----------------------------------------------------------------------------------------
def test_skip_data_loader_marks_its_last_batch_and_resumes() -> None:
    from accelerate.data_loader import SkipDataLoader

    loader = SkipDataLoader(Stream(9), skip_batches=1, use_stateful_dataloader=True, batch_size=2)
    state = GradientState()
    seen = []
    for batch in loader:
        seen.append((batch.tolist(), state.active_dataloader is loader, loader.end_of_dataloader))
    assert seen == [([2, 3], True, False), ([4, 5], True, False), ([6, 7], True, False), ([8], True, True)]
    assert state.active_dataloader is None
    iterator = iter(loader)
    next(iterator)
    saved = loader.state_dict()
    assert saved == {"batches_consumed": 2}
    resumed = SkipDataLoader(Stream(9), skip_batches=1, use_stateful_dataloader=True, batch_size=2)
    resumed.load_state_dict(saved)
    assert _batches(resumed) == [[4, 5], [6, 7], [8]]
    assert _batches(resumed) == [[2, 3], [4, 5], [6, 7], [8]]  # the restored position is used once
    with pytest.raises(ValueError, match="use_stateful_dataloader=True"):
        SkipDataLoader(Stream(3), batch_size=1).state_dict()


# --- upstream's extra loader arguments ---------------------------------------------------------------------
def test_iteration_sets_the_first_epoch_and_device_mesh_is_refused() -> None:
    from accelerate.data.samplers import SeedableRandomSampler

    sampler = SeedableRandomSampler(range(6), data_seed=1)
    loader = DataLoaderShard(IndexDataset(6), iteration=3, batch_sampler=BatchSampler(sampler, 2, False))
    assert loader.iteration == 3
    order = _batches(loader)
    sampler.set_epoch(3)
    assert order == [list(b) for b in BatchSampler(list(sampler), 2, False)]  # epoch 3's permutation
    assert loader.iteration == 4
    with pytest.raises(NotAvailableYetError, match="torch_device_mesh"):
        DataLoaderShard(IndexDataset(2), torch_device_mesh=object())
    with pytest.raises(NotAvailableYetError, match="torch_device_mesh"):
        prepare_data_loader(
            DataLoader(IndexDataset(2)), num_processes=1, process_index=0, torch_device_mesh=object()
        )
