"""`skip_first_batches`: a view of a loader that starts ``num_batches`` into the epoch.

For a prepared loader the view shares the loader's position and epoch: it iterates the epoch the
loader is at (restored by ``load_state``), skipping by index (no sample is loaded) where the data is
map-style, and when it finishes the original loader moves on to the next epoch. ``num_batches``
counts from the start of the epoch and *replaces* a position restored by ``load_state_dict``, so
scripts that call it after ``load_state`` skip exactly once.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sized
from typing import Any, Protocol, runtime_checkable

from torch.utils.data import BatchSampler, DataLoader, IterableDataset

from accelerate.data.base import DataLoaderStateMixin
from accelerate.data.dispatcher import DataLoaderDispatcher
from accelerate.data.shard_loader import DataLoaderShard
from accelerate.data.twin import BaseDataLoader
from accelerate.state.gradient import GradientState


@runtime_checkable
class DeviceFeedingLoader(Protocol):
    """A backend's loader that feeds its device from a prepared loader it wraps (XLA's
    ``MpDeviceLoaderWrapper``): batches are skipped in the wrapped loader, and :meth:`rewrap` feeds
    the skipping view to the device the same way. Backends implement it; this module names none."""

    @property
    def dataloader(self) -> Any:
        """The wrapped, prepared loader."""
        ...

    def rewrap(self, dataloader: Any) -> Any:
        """The same kind of wrapper, feeding the same device, around ``dataloader``."""
        ...


class SkipBatchSampler(BatchSampler):
    """The batches of ``batch_sampler`` after the first ``skip_batches``."""

    def __init__(self, batch_sampler: Any, skip_batches: int = 0) -> None:
        self.batch_sampler = batch_sampler
        self.skip_batches = skip_batches
        # BatchSampler's attributes, read through (no BatchSampler.__init__: there is no sampler to check).
        self.batch_size: Any = getattr(batch_sampler, "batch_size", None)
        self.drop_last = bool(getattr(batch_sampler, "drop_last", False))
        self.sampler: Any = getattr(batch_sampler, "sampler", None)

    def __iter__(self) -> Iterator[list[int]]:
        for index, batch in enumerate(self.batch_sampler):
            if index >= self.skip_batches:
                yield batch

    def __len__(self) -> int:
        return max(len(self.batch_sampler) - self.skip_batches, 0)


class SkipDataLoader(DataLoaderStateMixin, DataLoader[Any]):
    """A plain `DataLoader` that drops its first ``skip_batches`` batches (for iterable datasets).

    It tells ``GradientState`` when it starts and ends and marks its last batch (``end_of_dataloader``),
    so gradient accumulation syncs there as with a prepared loader. With
    ``use_stateful_dataloader=True`` its position can be saved (``state_dict``) and restored
    (``load_state_dict``: the next iteration starts there); without it those raise.
    """

    def __init__(
        self, dataset: Any, skip_batches: int = 0, use_stateful_dataloader: bool = False, **kwargs: Any
    ):
        super().__init__(dataset, **kwargs)
        self.skip_batches = skip_batches
        self.use_stateful_dataloader = use_stateful_dataloader
        self.gradient_state = GradientState()
        self._position: int | None = None  # batches of the epoch consumed (skipped + handed out), mid-epoch
        self._resume_at: int | None = None  # set by load_state_dict for the next iteration

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        start = self.skip_batches if self._resume_at is None else self._resume_at
        self._resume_at = None
        self._position = start
        self.begin()
        try:
            iterator = super().__iter__()
            for _ in range(start):
                if next(iterator, _END) is _END:
                    break
            current = next(iterator, _END)
            while current is not _END:
                following = next(iterator, _END)  # one ahead: the last batch is known as it goes out
                if following is _END:
                    self.end_of_dataloader = True
                    self.remainder = 0
                self._position += 1
                yield current
                current = following
            self._position = None
        finally:
            self.end()

    def __len__(self) -> int:
        return max(super().__len__() - self.skip_batches, 0)

    base_dataloader = BaseDataLoader()

    def _require_state(self, call: str) -> None:
        if not self.use_stateful_dataloader:
            raise ValueError(
                f"SkipDataLoader.{call}(): this loader keeps no position; create it with use_stateful_dataloader=True"
            )

    def state_dict(self) -> dict[str, Any]:
        """``{"batches_consumed": n}``: where the next iteration would start after `load_state_dict`."""
        self._require_state("state_dict")
        return {"batches_consumed": self.skip_batches if self._position is None else self._position}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._require_state("load_state_dict")
        self._resume_at = int(state_dict["batches_consumed"])

    def adjust_state_dict_for_prefetch(self) -> None:
        """Nothing to adjust: the batch fetched ahead is not counted in `state_dict`."""


_END: Any = object()


def skip_first_batches(dataloader: DataLoader[Any], num_batches: int = 0) -> DataLoader[Any]:
    """A loader that yields the batches of ``dataloader`` after the first ``num_batches`` of the epoch.

    Args:
        dataloader: a prepared loader (`DataLoaderShard` / `DataLoaderDispatcher`) or a plain `DataLoader`.
        num_batches: batches (per process) already done in this epoch.

    Raises:
        ValueError: ``num_batches`` is negative or larger than ``len(dataloader)``.

    Example:
        >>> accelerator.load_state("ckpt")                  # restores epoch and position
        >>> for batch in skip_first_batches(train_dataloader, done_in_epoch):  # or just the loader
        ...     ...
    """
    if num_batches < 0:
        raise ValueError(f"skip_first_batches needs num_batches >= 0, got {num_batches}")
    if isinstance(dataloader, Sized):
        try:
            length = len(dataloader)
        except TypeError:  # an iterable dataset without a length: checked while skipping
            length = None
        if length is not None and num_batches > length:
            raise ValueError(
                f"skip_first_batches(num_batches={num_batches}) is past the end of an epoch of {length} batches; "
                f"use 0 <= num_batches <= {length} (a position at the end of an epoch resumes at the next "
                "epoch: iterate the loader itself)"
            )
    if isinstance(dataloader, DeviceFeedingLoader):  # skip in the prepared loader, feed the device as before
        # The backend's wrapper stands in for the loader it wraps, as the one it was given did.
        rewrapped: DataLoader[Any] = dataloader.rewrap(skip_first_batches(dataloader.dataloader, num_batches))
        return rewrapped
    if isinstance(dataloader, DataLoaderShard | DataLoaderDispatcher):
        view = copy.copy(dataloader)  # shares dataset, sampler and (on purpose) the progress record
        view._iterator = None
        view._view_skip = num_batches
        view.base_dataloader = dataloader.base_dataloader
        return view
    return _skip_plain(dataloader, num_batches)


def _skip_plain(dataloader: DataLoader[Any], num_batches: int) -> DataLoader[Any]:
    from accelerate.data.prepare import loader_kwargs

    kwargs = loader_kwargs(dataloader)
    if isinstance(dataloader.dataset, IterableDataset) or dataloader.batch_sampler is None:
        return SkipDataLoader(
            dataloader.dataset,
            skip_batches=num_batches,
            batch_size=dataloader.batch_size,
            drop_last=dataloader.drop_last,
            sampler=None if isinstance(dataloader.dataset, IterableDataset) else dataloader.sampler,
            **kwargs,
        )
    return DataLoader(
        dataloader.dataset, batch_sampler=SkipBatchSampler(dataloader.batch_sampler, num_batches), **kwargs
    )
