"""Samplers: the per-process batch sampler shard, and the shuffles of `accelerate.data.shuffle`.

`BatchSamplerShard` reads the *whole* underlying batch sampler on every process (index lists only,
no data is loaded) and keeps its own part. Because every process walks the same batches, every
process can compute the same facts about the epoch — how many samples were padded into the last
round, where a resumed epoch starts — without talking to the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from typing import Any

from torch.utils.data import BatchSampler, Sampler

from accelerate.data.shuffle import SeedableRandomSampler, TorchOrderRandomSampler, epoch_seed, sampler_order


def check_process_index(owner: str, num_processes: int, process_index: int) -> None:
    """Raises unless ``0 <= process_index < num_processes`` (naming ``owner`` and both values)."""
    if num_processes < 1 or not 0 <= process_index < num_processes:
        raise ValueError(
            f"{owner} needs 0 <= process_index < num_processes; got process_index={process_index}, "
            f"num_processes={num_processes}"
        )


def _cycled(source: list[Any], start: int, count: int) -> list[Any]:
    """``count`` items of ``source`` repeated endlessly, starting at ``start``."""
    return [source[(start + i) % len(source)] for i in range(count)]


class WrappedBatchSampler(Sampler[list[Any]]):
    """A batch sampler built over the user's ``batch_sampler``: its sampler and epochs pass through."""

    batch_sampler: Any

    @property
    def sampler(self) -> Any:
        return getattr(self.batch_sampler, "sampler", None)

    def set_epoch(self, epoch: int) -> None:
        for target in (self.batch_sampler, self.sampler):
            set_epoch = getattr(target, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)
                return


class BatchSamplerShard(WrappedBatchSampler):
    """The batches of one process out of ``num_processes``.

    * ``split_batches=False`` (default): process ``i`` gets whole batches ``i, i + N, i + 2N, ...``.
      One *round* is N consecutive batches, one per process.
    * ``split_batches=True``: every batch is cut into N equal slices and process ``i`` gets slice
      ``i``; the batch size must be divisible by N.

    The end of the epoch:

    * ``drop_last=True`` (read from ``batch_sampler``): an incomplete last round is dropped, so
      every process gets ``len(batch_sampler) // N`` full batches (with ``split_batches`` the
      batch sampler already dropped the short batch).
    * ``even_batches=True``: the last round is completed with samples from the start of the
      epoch — first the short last batch is filled up, then the missing batches — so every process
      gets the same number of batches of the same size. The duplicated samples always sit at the
      end of the round, so gathering the round and dropping ``last_round_duplicates`` samples
      from its end gives exactly the data, in order.
    * ``even_batches=False``: nothing is added; some processes get one batch fewer (or a shorter
      one).

    Args:
        batch_sampler: the batch sampler to shard (its ``batch_size`` and ``drop_last`` are read).
        num_processes: number of processes sharing the data.
        process_index: this process's index.
        split_batches: slice each batch instead of dealing whole batches.
        even_batches: complete the last round so every process gets the same batches count/size.

    Example:
        >>> shard = BatchSamplerShard(BatchSampler(range(10), 3, False), num_processes=2, process_index=1)
        >>> list(shard)  # [[3, 4, 5], [9, 0, 1]]
    """

    def __init__(
        self,
        batch_sampler: Iterable[list[Any]],
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
        even_batches: bool = True,
    ) -> None:
        check_process_index("BatchSamplerShard", num_processes, process_index)
        self.batch_sampler = batch_sampler
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.batch_size: int | None = getattr(batch_sampler, "batch_size", None)
        self.drop_last: bool = bool(getattr(batch_sampler, "drop_last", False))
        if split_batches:
            if self.batch_size is None:
                raise ValueError(
                    "split_batches=True needs a batch sampler with a `batch_size` attribute, so that each "
                    "batch can be cut into equal slices; set split_batches=False to deal whole batches instead"
                )
            if self.batch_size % num_processes != 0:
                raise ValueError(
                    f"split_batches=True cuts every batch into {num_processes} equal slices, but the batch size "
                    f"{self.batch_size} is not divisible by {num_processes}. Use a batch size that is a multiple "
                    f"of {num_processes} (e.g. {self.batch_size + num_processes - self.batch_size % num_processes})"
                    ", or set split_batches=False."
                )
        if even_batches and num_processes > 1 and not isinstance(batch_sampler, Sized):
            raise ValueError(
                "even_batches=True needs a batch sampler with a length (to give every process the same, known, "
                "number of batches), but this one has no __len__. Give it a __len__, or pass "
                "DataLoaderConfiguration(even_batches=False) (processes may then get one batch fewer)."
            )
        # Underlying batches to pass over (resume), read by every __iter__. The prepared loader
        # sets it while it builds one iteration's DataLoader iterator and clears it after: torch's
        # multi-worker iterator calls iter() on the batch sampler twice (in __init__ and in
        # _reset) and keeps the second, so a value consumed by the first call would be lost.
        self.skip_base_batches = 0
        # Samples duplicated into the last round of the latest epoch; the same on every process.
        self.last_round_duplicates = 0

    # --- shared helpers -------------------------------------------------------------------
    @property
    def base_batches_per_step(self) -> int:
        """Underlying batches consumed by one step of every process."""
        return 1 if self.split_batches else self.num_processes

    @property
    def total_length(self) -> int:
        """Batches of the underlying batch sampler (all processes together)."""
        return len(self.batch_sampler)

    def __len__(self) -> int:
        return self.length_after(0)

    def length_after(self, skipped_base_batches: int) -> int:
        """Batches this process gets in an epoch whose first ``skipped_base_batches`` are passed over."""
        if not isinstance(self.batch_sampler, Sized):
            raise TypeError("this BatchSamplerShard wraps a batch sampler without __len__")
        total = max(len(self.batch_sampler) - skipped_base_batches, 0)
        if self.split_batches:
            if self.even_batches or self.drop_last or total == 0:
                return total
            # Only the short last batch can leave this process without a slice.
            last = self._last_batch_length()
            per_process = self.batch_size // self.num_processes  # type: ignore[operator]
            return total - 1 if last is not None and last <= per_process * self.process_index else total
        rounds, rest = divmod(total, self.num_processes)
        if rest == 0 or self.drop_last:
            return rounds
        if self.even_batches:
            return rounds + 1
        return rounds + (1 if self.process_index < rest else 0)

    def _last_batch_length(self) -> int | None:
        """Length of the last underlying batch if shorter than batch_size (None when full/unknown)."""
        sampler = self.sampler
        if self.batch_size is None or not isinstance(sampler, Sized):
            return None
        rest = len(sampler) % self.batch_size
        return rest or None

    # --- iteration -----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[list[Any]]:
        skip = self.skip_base_batches
        self.last_round_duplicates = 0
        if self.split_batches:
            return self._iter_split(skip)
        if (
            type(self.batch_sampler) is BatchSampler
            and isinstance(self.sampler, Sized)
            and self.num_processes > 1
        ):
            return self._iter_rounds_indexed(skip)
        return self._iter_rounds(skip)

    def _iter_rounds_indexed(self, skip: int) -> Iterator[list[Any]]:
        """`_iter_rounds` for a plain `BatchSampler`: the same batches, built only for this process.

        Reading the epoch's indices once and slicing out this process's batches avoids building
        (and discarding) the other processes' index lists batch by batch: the default data path
        then costs about what `DistributedSampler` does.
        """
        n, rank = self.num_processes, self.process_index
        size = self.batch_size
        assert size is not None  # a BatchSampler always has one
        indices = sampler_order(self.sampler)
        total = len(indices) // size if self.drop_last else -(-len(indices) // size)
        remaining = total - skip
        if remaining <= 0:
            return
        last = indices[(total - 1) * size : total * size]
        short_last = len(last) < size
        rounds, rest = divmod(remaining, n)
        # A round whose last batch is the short one is held back for padding, as in _iter_rounds.
        whole_rounds = rounds if (rest or not short_last) else rounds - 1
        for r in range(whole_rounds):
            k = skip + r * n + rank
            yield indices[k * size : (k + 1) * size]
        in_round = rest if (rest or not short_last) else n
        if in_round == 0 or self.drop_last:
            return
        first = skip + whole_rounds * n
        mine = indices[(first + rank) * size : (first + rank + 1) * size] if rank < in_round else None
        if not self.even_batches:
            if mine is not None:
                yield mine
            return
        yield from self._padded_last_round(mine, in_round, last, indices[: n * size], size)

    def _iter_split(self, skip: int) -> Iterator[list[Any]]:
        size = self.batch_size
        assert size is not None  # checked in __init__
        per_process = size // self.num_processes
        start, stop = per_process * self.process_index, per_process * (self.process_index + 1)
        head: list[Any] = []  # the epoch's first samples, to fill a short last batch
        for index, batch in enumerate(self.batch_sampler):
            if len(head) < size:
                head.extend(batch[: size - len(head)])
            if index < skip:
                continue
            batch = list(batch)
            if len(batch) < size and self.even_batches and not self.drop_last and head:
                missing = size - len(batch)
                self.last_round_duplicates = missing
                batch = batch + _cycled(head, 0, missing)
            part = batch[start:stop]
            if part:
                yield part

    def _iter_rounds(self, skip: int) -> Iterator[list[Any]]:
        n, rank, size = self.num_processes, self.process_index, self.batch_size
        pad = self.even_batches and not self.drop_last and n > 1
        # The epoch's first samples (or first batches when batch sizes vary): the padding source.
        head_cap = n * size if size is not None else n
        head: list[Any] = []
        mine: list[Any] | None = None
        in_round = 0
        last: list[Any] = []
        sizes_seen: set[int] | None = set()  # lengths of the batches before the last (size None)
        first_length: int | None = None
        for index, (batch, is_last) in enumerate(_with_last_flag(self.batch_sampler)):
            if first_length is None:
                first_length = len(batch)
            if size is None and sizes_seen is not None and not is_last:
                # Every batch before the last one of one length: the sampler batches by a size it
                # does not declare (no `batch_size` attribute); pad by that size, as a BatchSampler.
                sizes_seen.add(len(batch))
                if len(sizes_seen) > 1:
                    sizes_seen = None
            if pad and len(head) < head_cap:
                if size is not None:
                    head.extend(batch[: head_cap - len(head)])
                else:
                    head.append(list(batch))
            if index < skip:
                continue
            if in_round == rank:
                mine = batch
            last = batch
            in_round += 1
            # A short batch can only be the epoch's last one: hold its round back for padding.
            # Without a declared size, the last batch is short if shorter than the first, and all
            # the batches before it had one length.
            if size is None:
                full = not (is_last and pad and sizes_seen is not None and len(batch) < (first_length or 0))
            else:
                full = len(batch) == size
            if in_round == n and full:
                assert mine is not None
                yield mine
                mine, in_round = None, 0
        if in_round == 0:
            return
        if self.drop_last:
            return  # an incomplete last round is dropped on every process
        if not pad:
            if mine is not None:
                yield mine
            return
        nominal = size
        if size is None and sizes_seen is not None:
            nominal = next(iter(sizes_seen)) if sizes_seen else len(last)
            if len(last) <= nominal:
                head = [i for first_batch in head for i in first_batch]
            else:
                nominal = None
        yield from self._padded_last_round(mine, in_round, last, head, nominal)

    def _padded_last_round(
        self, mine: list[Any] | None, in_round: int, last: list[Any], head: list[Any], size: int | None
    ) -> Iterator[list[Any]]:
        n, rank = self.num_processes, self.process_index
        if size is None:
            # Variable batch sizes: the missing processes get the epoch's first whole batches.
            fill_batches = _cycled(head, 0, n - in_round)
            self.last_round_duplicates = sum(len(b) for b in fill_batches)
            if mine is not None:
                yield mine
            else:
                yield fill_batches[rank - in_round]
            return
        short_by = size - len(last)
        self.last_round_duplicates = short_by + (n - in_round) * size
        if rank < in_round - 1:
            assert mine is not None
            yield mine
        elif rank == in_round - 1:
            yield list(last) + _cycled(head, 0, short_by)
        else:
            yield _cycled(head, short_by + (rank - in_round) * size, size)


def _with_last_flag(batches: Iterable[list[Any]]) -> Iterator[tuple[list[Any], bool]]:
    """``(batch, is_last)`` for each batch (one batch is read ahead)."""
    iterator = iter(batches)
    sentinel: Any = object()
    current = next(iterator, sentinel)
    while current is not sentinel:
        upcoming = next(iterator, sentinel)
        yield current, upcoming is sentinel
        current = upcoming


def base_batch_sampler(batch_sampler: Any) -> Any:
    """The user's batch sampler under a shard (itself if not sharded)."""
    return batch_sampler.batch_sampler if isinstance(batch_sampler, BatchSamplerShard) else batch_sampler


def _innermost_batch_sampler(dataloader: Any) -> Any:
    batch_sampler = getattr(dataloader, "batch_sampler", None)
    # Through shards and skip wrappers (each keeps the one it wraps as `.batch_sampler`).
    while batch_sampler is not None and hasattr(batch_sampler, "batch_sampler"):
        batch_sampler = batch_sampler.batch_sampler
    return batch_sampler


def get_sampler(dataloader: Any) -> Any:
    """The sampler that orders ``dataloader``'s samples (a `RandomSampler` when it shuffles).

    Looks through the wrappers accelerate puts around the user's batch sampler (`BatchSamplerShard`,
    `SkipBatchSampler`); for a loader built with ``batch_size=None`` it is the loader's ``sampler``,
    and for one given a `BatchSampler` as ``sampler`` it is that batch sampler's sampler.

    Example:
        >>> get_sampler(accelerator.prepare(DataLoader(ds, shuffle=True)))
        <...RandomSampler object at ...>
    """
    reader = _sampler_reader(dataloader)
    return getattr(reader, "sampler", None) if reader is not None else getattr(dataloader, "sampler", None)


def _sampler_reader(dataloader: Any) -> Any:
    """The batch sampler whose ``sampler`` attribute :func:`get_sampler` returns (None: the loader's own)."""
    reader = _innermost_batch_sampler(dataloader)
    if reader is None:
        current = getattr(dataloader, "sampler", None)
        if isinstance(current, BatchSamplerShard):  # a prepared loader built with sampler=BatchSampler(...)
            current = base_batch_sampler(current)
        return current if isinstance(current, BatchSampler) else None
    # A BatchSampler given as `sampler`: the loader batches its batches; the inner one orders the samples.
    inner = getattr(reader, "sampler", None)
    return inner if isinstance(inner, BatchSampler) else reader


def set_sampler(dataloader: Any, sampler: Any) -> None:
    """Replaces the sampler :func:`get_sampler` returns, in the batch sampler that reads it."""
    reader = _sampler_reader(dataloader)
    if reader is None:
        raise ValueError(
            "set_sampler: this loader has no batch sampler (it was built with batch_size=None) and a "
            "DataLoader's own `sampler` cannot change after it is created; build a new DataLoader with "
            "sampler=... instead"
        )
    reader.sampler = sampler


__all__ = [
    "BatchSampler", "BatchSamplerShard", "SeedableRandomSampler", "TorchOrderRandomSampler", "base_batch_sampler",
    "epoch_seed", "get_sampler", "set_sampler",
]  # fmt: skip
