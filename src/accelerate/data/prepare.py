"""`prepare_data_loader`: turns a user's `DataLoader` into this process's prepared loader."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

from accelerate.data.base import check_no_device_mesh
from accelerate.data.dispatcher import DataLoaderDispatcher, GlobalBatchSampler
from accelerate.data.iterable import IterableDatasetShard, is_sharded_by_rank
from accelerate.data.samplers import BatchSamplerShard, SeedableRandomSampler, TorchOrderRandomSampler
from accelerate.data.shard_loader import DataLoaderShard, _install_generator
from accelerate.state.gradient import GradientState


class _Unbatched:
    """Collate for a loader built with ``batch_size=None``: its one-index batches hold one sample."""

    def __init__(self, collate_fn: Callable[[Any], Any]) -> None:
        self.collate_fn = collate_fn

    def __call__(self, samples: list[Any]) -> Any:
        return self.collate_fn(samples[0])


def loader_kwargs(dataloader: DataLoader[Any]) -> dict[str, Any]:
    """The arguments of ``dataloader`` that do not decide which samples it reads."""
    kwargs: dict[str, Any] = {
        "num_workers": dataloader.num_workers,
        "collate_fn": dataloader.collate_fn,
        "pin_memory": dataloader.pin_memory,
        "timeout": dataloader.timeout,
        "worker_init_fn": dataloader.worker_init_fn,
        "multiprocessing_context": dataloader.multiprocessing_context,
        "generator": dataloader.generator,
        "persistent_workers": dataloader.persistent_workers,
        "pin_memory_device": dataloader.pin_memory_device,
    }
    if dataloader.num_workers > 0:
        kwargs["prefetch_factor"] = dataloader.prefetch_factor
    if hasattr(dataloader, "in_order"):
        kwargs["in_order"] = dataloader.in_order
    return kwargs


def _torch_order(sampler: Any) -> Any:
    """A plain `RandomSampler` without a generator becomes a `TorchOrderRandomSampler` (same order as
    PyTorch, resumable); a sampler with its own generator keeps it (its state is tracked instead)."""
    if type(sampler) is RandomSampler and sampler.generator is None:
        return TorchOrderRandomSampler.replacing(sampler)
    if type(sampler) is RandomSampler:
        return copy.copy(sampler)  # leave the user's sampler alone
    return sampler


def _seedable(sampler: Any, data_seed: int | None) -> Any:
    # Only the stock sampler: a user's subclass may shuffle its own way.
    if type(sampler) is RandomSampler:
        return SeedableRandomSampler(
            sampler.data_source,
            replacement=sampler.replacement,
            num_samples=sampler._num_samples,
            generator=sampler.generator,
            data_seed=data_seed,
        )
    if isinstance(sampler, SeedableRandomSampler) and data_seed is not None:
        sampler.initial_seed = data_seed
    return sampler


def prepare_data_loader(
    dataloader: DataLoader[Any],
    device: torch.device | str | None = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: Sequence[str] | None = None,
    dispatch_batches: bool | None = None,
    even_batches: bool = True,
    slice_fn_for_dispatch: Callable[[Any, slice], Any] | None = None,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_stateful_dataloader: bool = False,
    torch_device_mesh: Any = None,
    *,
    gradient_state: GradientState | None = None,
) -> DataLoaderShard | DataLoaderDispatcher:
    """Shards ``dataloader`` for this process; ``Accelerator.prepare`` calls it for every loader.

    Args:
        dataloader: the user's `DataLoader` (not one that is already prepared).
        device: target device of the batches (default: the process's device).
        num_processes / process_index: default to ``PartialState()``'s.
        split_batches: each process gets a slice of every batch (the batch size must be divisible by
            ``num_processes``) instead of whole batches.
        put_on_device: move each batch to ``device``.
        rng_types: RNGs (``"torch"``, ``"cuda"``, ``"generator"``) copied from process 0 at each epoch.
        dispatch_batches: process 0 reads and dispatches (default: for iterable datasets that do
            not shard themselves, when there is more than one process).
        even_batches: complete the last round with samples from the start so every process gets the
            same number of equally sized batches (``gather_for_metrics`` drops them again).
        slice_fn_for_dispatch: custom ``slice_fn(batch, slice)`` for the dispatcher.
        use_seedable_sampler: replace a `RandomSampler` by a `SeedableRandomSampler`, whose order
            depends only on (seed, epoch). By default a `RandomSampler` without a generator shuffles
            its first epoch exactly as PyTorch's, and later epochs from that first draw and the
            epoch (a `TorchOrderRandomSampler`); both resume exactly from the loader's state alone.
        data_seed: the seedable sampler's seed; giving one implies ``use_seedable_sampler=True``
            (a seed that nothing would use is never ignored silently).
        non_blocking: copy batches to the device asynchronously (helps with ``pin_memory=True``).
        use_stateful_dataloader: ``load_state_dict`` restores the position as well as the epoch
            (``Accelerator.prepare`` passes ``DataLoaderConfiguration.use_stateful_dataloader``).
        torch_device_mesh: tensor/context-parallel data loading; not available (anything but None raises).
        gradient_state: told when iteration starts and ends (default: ``GradientState()``).

    Raises:
        ValueError: the loader is already prepared, or ``split_batches`` with an indivisible batch size,
            or ``even_batches`` with a batch sampler without a length.

    Example:
        >>> loader = prepare_data_loader(DataLoader(ds, batch_size=8, shuffle=True), put_on_device=True)
    """
    check_no_device_mesh(torch_device_mesh, "prepare_data_loader")
    if isinstance(dataloader, DataLoaderShard | DataLoaderDispatcher):
        raise ValueError(
            "this DataLoader was already prepared (it is a DataLoaderShard/DataLoaderDispatcher); preparing it "
            "again would shard the shard. Pass the original DataLoader to prepare, or use this one as it is."
        )
    if not isinstance(dataloader, DataLoader):
        raise TypeError(f"prepare_data_loader needs a torch DataLoader, got {type(dataloader).__name__}")
    if num_processes is None or process_index is None or device is None:
        from accelerate.state import PartialState

        state = PartialState()
        num_processes = state.num_processes if num_processes is None else num_processes
        process_index = state.process_index if process_index is None else process_index
        device = state.device if device is None else device
    dataset = dataloader.dataset
    iterable = isinstance(dataset, IterableDataset)
    if dispatch_batches is None:
        dispatch_batches = iterable and num_processes > 1 and not is_sharded_by_rank(dataset)
    common: dict[str, Any] = {
        "device": device if put_on_device else None,
        "rng_types": rng_types,
        "use_stateful_dataloader": use_stateful_dataloader,
        "_non_blocking": non_blocking,
        "gradient_state": gradient_state,
    }
    use_seedable_sampler = use_seedable_sampler or data_seed is not None
    if dispatch_batches:
        prepared: DataLoaderShard | DataLoaderDispatcher = _dispatcher(
            dataloader, num_processes, process_index, split_batches, even_batches, slice_fn_for_dispatch,
            use_seedable_sampler, data_seed, common,
        )  # fmt: skip
    elif iterable:
        prepared = _iterable_shard(
            dataloader, num_processes, process_index, split_batches, even_batches, common
        )
    else:
        prepared = _map_shard(
            dataloader, num_processes, process_index, split_batches, even_batches, use_seedable_sampler,
            data_seed, common,
        )  # fmt: skip
    prepared.base_dataloader = dataloader
    return prepared


def _alike_everywhere(batch_sampler: Any, use_seedable_sampler: bool, data_seed: int | None) -> Any:
    """A stock `BatchSampler` rebuilt over a sampler that shuffles alike on every process (a
    `SeedableRandomSampler`, or a `TorchOrderRandomSampler` for a `RandomSampler` without a
    generator); the user's batch sampler is left untouched. Other batch samplers are kept."""
    if type(batch_sampler) is not BatchSampler:
        return batch_sampler
    sampler = batch_sampler.sampler
    sampler = _seedable(sampler, data_seed) if use_seedable_sampler else _torch_order(sampler)
    return BatchSampler(sampler, batch_sampler.batch_size, batch_sampler.drop_last)


def _map_shard(
    dataloader: DataLoader[Any],
    num_processes: int,
    process_index: int,
    split_batches: bool,
    even_batches: bool,
    use_seedable_sampler: bool,
    data_seed: int | None,
    common: dict[str, Any],
) -> DataLoaderShard:
    kwargs = loader_kwargs(dataloader)
    batch_sampler = dataloader.batch_sampler
    if batch_sampler is None and isinstance(dataloader.sampler, BatchSampler):
        # DataLoader(ds, sampler=BatchSampler(...), batch_size=None): the dataset is indexed with
        # whole index lists. Shard those lists (padding the last round by samples, as any batch
        # sampler) and keep the loader's shape: the shard is its sampler, batch_size stays None.
        sampler_batches = _alike_everywhere(dataloader.sampler, use_seedable_sampler, data_seed)
        generator = _install_generator(getattr(sampler_batches, "sampler", None))
        shard = BatchSamplerShard(sampler_batches, num_processes, process_index, split_batches, even_batches)
        return DataLoaderShard(
            dataloader.dataset,
            sampler=shard,
            batch_size=None,
            synchronized_generator=generator,
            **common,
            **kwargs,
        )
    if batch_sampler is None:
        # batch_size=None: each index is a batch of its own; keep the loader's collate semantics.
        batch_sampler = BatchSampler(dataloader.sampler, batch_size=1, drop_last=False)
        kwargs["collate_fn"] = _Unbatched(dataloader.collate_fn)
    batch_sampler = _alike_everywhere(batch_sampler, use_seedable_sampler, data_seed)
    inner_sampler = getattr(batch_sampler, "sampler", None)
    generator = _install_generator(inner_sampler)
    shard = BatchSamplerShard(batch_sampler, num_processes, process_index, split_batches, even_batches)
    return DataLoaderShard(
        dataloader.dataset, batch_sampler=shard, synchronized_generator=generator, **common, **kwargs
    )


def _iterable_shard(
    dataloader: DataLoader[Any],
    num_processes: int,
    process_index: int,
    split_batches: bool,
    even_batches: bool,
    common: dict[str, Any],
) -> DataLoaderShard:
    kwargs = loader_kwargs(dataloader)
    dataset = dataloader.dataset
    batch_size = dataloader.batch_size
    if num_processes == 1 or is_sharded_by_rank(dataset):
        # Nothing to split (or the dataset splits itself): read it as the user built it.
        return DataLoaderShard(
            dataset, batch_size=batch_size, drop_last=dataloader.drop_last, **common, **kwargs
        )
    if batch_size is None:
        raise ValueError(
            "sharding an iterable dataset needs a DataLoader batch_size (got None); set batch_size, mark the "
            "dataset as already sharded (dataset.sharded_by_rank = True), or use dispatch_batches=True"
        )
    shard = IterableDatasetShard(
        dataset,
        batch_size=batch_size,
        drop_last=dataloader.drop_last,
        num_processes=num_processes,
        process_index=process_index,
        split_batches=split_batches,
        even_batches=even_batches,
    )
    return DataLoaderShard(shard, batch_size=shard.process_batch_size, **common, **kwargs)


def _dispatcher(
    dataloader: DataLoader[Any],
    num_processes: int,
    process_index: int,
    split_batches: bool,
    even_batches: bool,
    slice_fn: Callable[[Any, slice], Any] | None,
    use_seedable_sampler: bool,
    data_seed: int | None,
    common: dict[str, Any],
) -> DataLoaderDispatcher:
    kwargs = loader_kwargs(dataloader)
    batch_size = dataloader.batch_size
    if dataloader.batch_sampler is not None and batch_size is None:
        # DataLoader(ds, batch_sampler=...), a custom one or not: process 0 reads its batches (num_processes of them per step, or
        # one with split_batches) and every process gets its equal slice of each.
        user_batches = dataloader.batch_sampler
        generator = _install_generator(getattr(user_batches, "sampler", None))
        return DataLoaderDispatcher(
            dataloader.dataset,
            split_batches=split_batches,
            _drop_last=bool(getattr(user_batches, "drop_last", False)),
            slice_fn=slice_fn,
            even_batches=even_batches,
            num_processes=num_processes,
            process_index=process_index,
            synchronized_generator=generator,
            batch_sampler=GlobalBatchSampler(user_batches, 1 if split_batches else num_processes),
            **common,
            **kwargs,
        )
    if batch_size is None:
        raise ValueError("dispatch_batches=True needs a DataLoader batch_size (got None)")
    if split_batches and batch_size % num_processes != 0:
        raise ValueError(
            f"split_batches=True cuts every batch into {num_processes} equal slices, but the batch size "
            f"{batch_size} is not divisible by {num_processes}. Use a multiple of {num_processes}, or set "
            "split_batches=False."
        )
    total = batch_size if split_batches else batch_size * num_processes
    sampler: Any = None
    generator = None
    if not isinstance(dataloader.dataset, IterableDataset):
        sampler = (
            _seedable(dataloader.sampler, data_seed)
            if use_seedable_sampler
            else _torch_order(copy.copy(dataloader.sampler))
        )
        generator = _install_generator(sampler)
    return DataLoaderDispatcher(
        dataloader.dataset,
        split_batches=split_batches,
        _drop_last=dataloader.drop_last,
        slice_fn=slice_fn,
        even_batches=even_batches,
        num_processes=num_processes,
        process_index=process_index,
        synchronized_generator=generator,
        batch_size=total,
        drop_last=dataloader.drop_last,
        sampler=sampler,
        **common,
        **kwargs,
    )
