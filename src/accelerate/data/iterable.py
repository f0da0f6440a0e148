"""`IterableDatasetShard`: one process's samples of an iterable dataset that every process reads.

Every process reads the full stream and keeps its own part of each round, so no communication is
needed and every process knows the same facts about the epoch's end (how many samples were padded).
A dataset that already gives each rank its own data is marked as such and never sharded again.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from accelerate.data.samplers import _cycled, check_process_index

#: Set this attribute to True on an iterable dataset that already yields only this rank's data.
SHARDED_BY_RANK_ATTRIBUTE = "sharded_by_rank"


def is_sharded_by_rank(dataset: Any) -> bool:
    """True for datasets that already shard themselves by rank, so they must not be sharded again.

    Recognised: ``dataset.sharded_by_rank = True`` (set it on your own `IterableDataset`), and
    Hugging Face ``datasets`` iterables returned by ``split_dataset_by_node``.
    """
    if getattr(dataset, SHARDED_BY_RANK_ATTRIBUTE, False) is True:
        return True
    # `datasets.distributed.split_dataset_by_node` records the node split in `_distributed`.
    return getattr(dataset, "_distributed", None) is not None


class IterableDatasetShard(IterableDataset[Any]):
    """The samples of one process out of ``num_processes`` from an iterable dataset.

    A *round* is ``batch_size * num_processes`` samples (``batch_size`` with ``split_batches``);
    process ``i`` gets the ``i``-th slice of each round, so a loader with the per-process batch
    size makes one batch per round. At the end:

    * ``drop_last=True``: an incomplete last round is dropped.
    * ``even_batches=True`` (default): the last round is completed with samples from the start of the
      stream (duplicates at its end; their count is ``last_round_duplicates``).
    * ``even_batches=False``: the last round is split as it is; some processes get fewer samples.

    Args:
        dataset: the iterable dataset (read in full by every process).
        batch_size: the loader's batch size (per process, or total with ``split_batches``).
        drop_last: drop an incomplete last round.
        num_processes: number of processes.
        process_index: this process's index.
        split_batches: ``batch_size`` is the total over all processes.
        even_batches: complete the last round with duplicates.

    Example:
        >>> shard = IterableDatasetShard(my_stream, batch_size=4, num_processes=2, process_index=0)
        >>> loader = DataLoader(shard, batch_size=4)
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        drop_last: bool = False,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
        even_batches: bool = True,
    ) -> None:
        check_process_index("IterableDatasetShard", num_processes, process_index)
        if split_batches and batch_size % num_processes != 0:
            raise ValueError(
                f"split_batches=True cuts every batch into {num_processes} equal slices, but the batch size "
                f"{batch_size} is not divisible by {num_processes}. Use a multiple of {num_processes}, or set "
                "split_batches=False."
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.last_round_duplicates = 0
        self.epoch = 0

    @property
    def round_size(self) -> int:
        return self.batch_size if self.split_batches else self.batch_size * self.num_processes

    @property
    def process_batch_size(self) -> int:
        return self.batch_size // self.num_processes if self.split_batches else self.batch_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        set_epoch = getattr(self.dataset, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def expected_duplicates(self) -> int:
        """Padded samples per epoch computed from ``len(dataset)`` (-1 when it has no length)."""
        if not isinstance(self.dataset, Sized):
            return -1
        rest = len(self.dataset) % self.round_size
        if rest == 0 or self.drop_last or not self.even_batches or self.num_processes == 1:
            return 0
        return self.round_size - rest

    def __len__(self) -> int:
        if not isinstance(self.dataset, Sized):
            raise TypeError(
                f"{type(self.dataset).__name__} has no length, so this IterableDatasetShard has none"
            )
        rounds, rest = divmod(len(self.dataset), self.round_size)
        mine = rounds * self.process_batch_size
        if rest and not self.drop_last:
            if self.even_batches and self.num_processes > 1:
                mine += self.process_batch_size
            else:
                start = self.process_batch_size * self.process_index
                mine += min(max(rest - start, 0), self.process_batch_size)
        return mine

    def __iter__(self) -> Iterator[Any]:
        self.last_round_duplicates = 0
        size, per = self.round_size, self.process_batch_size
        start, stop = per * self.process_index, per * (self.process_index + 1)
        # In DataLoader workers every worker reads the whole stream; worker w keeps rounds w, w + W,
        # ... (one batch each), and the loader's round-robin over workers restores the order.
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        head: list[Any] = []  # the stream's first round: padding for the last one
        buffer: list[Any] = []
        rounds = 0
        for sample in self.dataset:
            buffer.append(sample)
            if len(buffer) == size:
                if not head:
                    head = buffer
                if rounds % workers == worker:
                    yield from buffer[start:stop]
                rounds += 1
                buffer = []
        if not buffer or self.drop_last or rounds % workers != worker:
            return
        if self.even_batches and self.num_processes > 1:
            missing = size - len(buffer)
            source = head or list(buffer)  # a stream shorter than one round pads from itself
            buffer = buffer + _cycled(source, 0, missing)
            self.last_round_duplicates = missing
        yield from buffer[start:stop]
