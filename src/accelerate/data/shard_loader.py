"""`DataLoaderShard`: the loader `prepare` returns when every process reads its own shard.

The per-batch path is lean: one batch is fetched ahead so the last one is known when it is
yielded (``end_of_dataloader``) without any communication, and batches are moved to the device
with one walk of their structure (none when the device is the CPU).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, RandomSampler

from accelerate.data.base import PreparedLoaderMixin, check_no_device_mesh, preserve_global_rng
from accelerate.data.iterable import IterableDatasetShard
from accelerate.data.samplers import (
    BatchSamplerShard,
    SeedableRandomSampler,
    TorchOrderRandomSampler,
    base_batch_sampler,
)
from accelerate.state.gradient import GradientState


class DataLoaderShard(PreparedLoaderMixin, DataLoader[Any]):
    """A `DataLoader` over one process's shard, as returned by ``Accelerator.prepare``.

    Build it like a `DataLoader` (usually with a `BatchSamplerShard` as ``batch_sampler`` or an
    `IterableDatasetShard` as ``dataset``); `prepare_data_loader` does this for you.

    Args:
        dataset: the dataset (or an `IterableDatasetShard`).
        device: where to move each batch (None: leave it where the collate function put it).
        rng_types: extra RNGs (``"torch"``, ``"cuda"``, ``"generator"``) to copy from process 0 at
            the start of each epoch; the shuffle generator/seed is always synchronised.
        synchronized_generator: the sampler's generator, synchronised and saved for exact resume.
        skip_batches: batches to skip at the start of every iteration (see `skip_first_batches`).
        use_stateful_dataloader: `load_state_dict` restores the position, not only the epoch.
        torch_device_mesh: not supported (anything but None raises); ``accelerator.prepare`` shards
            by the data-parallel coordinate of a ParallelismConfig instead.
        iteration: the epoch the first iteration is (as `set_epoch` would set it).
        gradient_state: told when iteration starts/ends (defaults to ``GradientState()``).
        **kwargs: the usual `DataLoader` arguments.

    Attributes:
        end_of_dataloader: True while the last batch of the epoch is being used.
        remainder: samples duplicated into the last round (known once the last batch is out).
    """

    def __init__(
        self,
        dataset: Any,
        device: torch.device | str | None = None,
        rng_types: Sequence[str] | None = None,
        synchronized_generator: torch.Generator | None = None,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        _drop_last: bool = False,
        _non_blocking: bool = False,
        torch_device_mesh: Any = None,
        iteration: int = 0,
        *,
        gradient_state: GradientState | None = None,
        **kwargs: Any,
    ) -> None:
        check_no_device_mesh(torch_device_mesh, "DataLoaderShard")
        super().__init__(dataset, **kwargs)
        self._init_prepared(
            device, rng_types, synchronized_generator, _non_blocking, use_stateful_dataloader, gradient_state
        )
        self._progress.epoch = int(iteration)
        self._drop_last = _drop_last
        if skip_batches:
            self._view_skip = int(skip_batches)

    # --- what the mixin needs ------------------------------------------------------------------
    @property
    def _batch_shard(self) -> BatchSamplerShard | None:
        """The `BatchSamplerShard`: the batch sampler, or the sampler of a ``batch_size=None`` loader."""
        for candidate in (self.batch_sampler, self.sampler):
            if isinstance(candidate, BatchSamplerShard):
                return candidate
        return None

    @property
    def _shard(self) -> BatchSamplerShard | IterableDatasetShard | None:
        if self._batch_shard is not None:
            return self._batch_shard
        if isinstance(self.dataset, IterableDatasetShard):
            return self.dataset
        return None

    @property
    def _num_shards(self) -> int:
        shard = self._shard
        return shard.num_processes if shard is not None else 1

    @property
    def _split_batches(self) -> bool:
        shard = self._shard
        return shard.split_batches if shard is not None else False

    @property
    def _base_batches_per_step(self) -> int | None:
        shard = self._batch_shard
        return shard.base_batches_per_step if shard is not None else None

    @property
    def _base_batch_size(self) -> int | None:
        shard = self._batch_shard
        return shard.batch_size if shard is not None else None

    def _shuffle_sampler(self) -> Any:
        return getattr(base_batch_sampler(self._batch_shard or self.batch_sampler), "sampler", None)

    # --- facts -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        shard = self._batch_shard
        if self._view_skip and shard is not None:
            return shard.length_after(self._view_skip * shard.base_batches_per_step)
        return max(super().__len__() - (self._view_skip or 0), 0)

    @property
    def total_batch_size(self) -> int:
        """Samples per step over all processes."""
        shard = self._shard
        if isinstance(shard, BatchSamplerShard):
            size = shard.batch_size or 0
            return size if shard.split_batches else size * shard.num_processes
        if isinstance(shard, IterableDatasetShard):
            return shard.round_size
        return int(self.batch_size or 1)

    @property
    def total_dataset_length(self) -> int:
        dataset = self.dataset.dataset if isinstance(self.dataset, IterableDatasetShard) else self.dataset
        return len(dataset)  # type: ignore[arg-type]

    def _epoch_duplicates(self) -> int:
        shard = self._shard
        if isinstance(shard, BatchSamplerShard):
            return shard.last_round_duplicates  # the sampler is always read in this process
        if isinstance(shard, IterableDatasetShard):
            if self.num_workers == 0:
                return shard.last_round_duplicates
            return shard.expected_duplicates()  # the shard ran in workers; only its length tells
        return 0

    # --- iteration ----------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        start, restoring = self._begin_iteration()
        loader_skip = start.batches
        shard = self._batch_shard
        if shard is not None:
            base = start.base_batches or 0
            self._check_skip(base)
            shard.skip_base_batches = base
            loader_skip = 0  # skipped as index lists, before any sample is loaded
        self.begin()
        try:
            try:
                with preserve_global_rng(restoring and start.batches > 0):
                    iterator = super().__iter__()
            finally:
                # Every iter() torch makes on the batch sampler is made while building the
                # iterator (persistent workers' _reset included): later epochs start at 0.
                if shard is not None:
                    shard.skip_base_batches = 0
            for _ in range(loader_skip):
                if next(iterator, _END) is _END:
                    raise ValueError(
                        f"cannot skip {loader_skip} batches: this epoch has fewer. Resume from a position "
                        "inside the epoch (skip_first_batches needs num_batches <= len(dataloader))"
                    )
            current = next(iterator, _END)
            while current is not _END:
                batch = self._to_device(current)
                current = next(iterator, _END)  # one ahead: the last batch is known as it goes out
                if current is _END:
                    self.end_of_dataloader = True
                    self._remainder = self._epoch_duplicates()
                self._count_batch()
                yield batch
            if self._remainder < 0:  # an empty epoch
                self._remainder = self._epoch_duplicates()
            self._finish_iteration()
        finally:
            self.end()

    def _check_skip(self, base: int) -> None:
        sampler = self._batch_shard
        if base and sampler is not None and hasattr(sampler.batch_sampler, "__len__"):
            available = len(sampler.batch_sampler)
            if base > available:
                raise ValueError(
                    f"cannot resume {base} batches into an epoch of {available} batches; the saved position "
                    "is past the end (was the dataset or batch size changed?). Use num_batches <= "
                    "len(dataloader) with skip_first_batches, or resume from an epoch boundary."
                )


_END: Any = object()


def _install_generator(sampler: Any) -> torch.Generator | None:
    """The generator of a `RandomSampler` that brought its own, to synchronise and save its state.

    Samplers that manage their state themselves (`SeedableRandomSampler`: seed and epoch;
    `TorchOrderRandomSampler`: base seed and epoch) need none.
    """
    if not isinstance(sampler, RandomSampler) or isinstance(
        sampler, SeedableRandomSampler | TorchOrderRandomSampler
    ):
        return None
    generator: torch.Generator | None = sampler.generator  # RandomSampler leaves its attribute untyped
    return generator
