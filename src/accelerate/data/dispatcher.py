"""`DataLoaderDispatcher`: process 0 reads every batch and sends each process its slice.

For data that cannot be sharded (a stream only one process may read). Each step costs one small
object exchange (the batch's layout, and whether it is the last) plus one tensor broadcast per
dtype. Because process 0 fetches one batch ahead, the "last batch" flag travels with the last
batch itself: every process learns the end in the same step, and none waits on a broadcast
that will never come. A failure while reading on process 0 is sent to all processes and raised
everywhere, instead of leaving the others blocked.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import torch
from torch.utils.data import DataLoader

from accelerate.collectives.agreement import agree_on_failure
from accelerate.collectives.communicator import current_communicator
from accelerate.data.base import PreparedLoaderMixin, check_no_device_mesh, preserve_global_rng
from accelerate.data.batches import batch_length, pad_batch, slice_batch
from accelerate.data.samplers import WrappedBatchSampler
from accelerate.state.gradient import GradientState
from accelerate.utils.tree import recursively_apply

_END: Any = object()


class _Slot(NamedTuple):
    """Stands for the ``position``-th tensor of a batch in the layout sent ahead of the data."""

    position: int
    shape: tuple[int, ...]
    dtype: torch.dtype


class GlobalBatchSampler(WrappedBatchSampler):
    """Process 0's batches for dispatching a user's batch sampler: ``group`` of its batches at a time.

    With ``split_batches=False`` every process gets one of the user's batches per step, so one
    dispatched (global) batch joins ``num_processes`` consecutive batches; with ``split_batches``
    each of the user's batches is the global batch (``group=1``). With the batch sampler's
    ``drop_last`` an incomplete last group is dropped, as sharding drops an incomplete round.
    """

    def __init__(self, batch_sampler: Any, group: int) -> None:
        self.batch_sampler = batch_sampler
        self.group = group
        self.drop_last = bool(getattr(batch_sampler, "drop_last", False))
        size = getattr(batch_sampler, "batch_size", None)
        self.batch_size = size * group if isinstance(size, int) else None

    def __len__(self) -> int:
        total = len(self.batch_sampler)
        return total // self.group if self.drop_last else -(-total // self.group)

    def __iter__(self) -> Iterator[list[Any]]:
        joined: list[Any] = []
        count = 0
        for batch in self.batch_sampler:
            joined.extend(batch)
            count += 1
            if count == self.group:
                yield joined
                joined, count = [], 0
        if count and not self.drop_last:
            yield joined


class DataLoaderDispatcher(PreparedLoaderMixin, DataLoader[Any]):
    """A `DataLoader` whose batches are read by process 0 and dispatched (``dispatch_batches=True``).

    The wrapped loader's batch is the *total* batch: ``batch_size * num_processes`` samples, or
    ``batch_size`` with ``split_batches=True``; process ``i`` gets its ``i``-th equal slice. With
    ``even_batches`` a short last batch is completed with samples of the epoch's first batch
    (``remainder`` of them), otherwise it is cut as it is and processes past its end get no batch.

    Args:
        dataset: the dataset, read only on process 0.
        split_batches: ``batch_size`` is the total batch size (else per process).
        skip_batches: batches to skip at the start of every iteration.
        use_stateful_dataloader: `load_state_dict` restores the position, not only the epoch.
        slice_fn: ``slice_fn(batch, slice)`` cuts a process's part (default: slices tensors along
            dim 0 and lists of plain values such as strings).
        even_batches: complete a short last batch.
        num_processes / process_index: default to the process group's.
        device, rng_types, synchronized_generator, gradient_state: as `DataLoaderShard`.
        **kwargs: the usual `DataLoader` arguments (``batch_size`` is the total batch size).
    """

    # Class-level too, as upstream (introspection and mocks see them); set per loader in __init__.
    submesh_tp: Any = None
    submesh_dp: Any = None
    submesh_fsdp: Any = None

    def __init__(
        self,
        dataset: Any,
        split_batches: bool = False,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        _drop_last: bool = False,
        _non_blocking: bool = False,
        slice_fn: Callable[[Any, slice], Any] | None = None,
        torch_device_mesh: Any = None,
        iteration: int = 0,
        *,
        even_batches: bool = True,
        num_processes: int | None = None,
        process_index: int | None = None,
        device: torch.device | str | None = None,
        rng_types: Sequence[str] | None = None,
        synchronized_generator: torch.Generator | None = None,
        gradient_state: GradientState | None = None,
        **kwargs: Any,
    ) -> None:
        check_no_device_mesh(torch_device_mesh, "DataLoaderDispatcher")
        super().__init__(dataset, **kwargs)
        self._init_prepared(
            device, rng_types, synchronized_generator, _non_blocking, use_stateful_dataloader, gradient_state
        )
        self._progress.epoch = int(iteration)
        if num_processes is None or process_index is None:
            from accelerate.state import PartialState

            state = PartialState()
            num_processes = state.num_processes if num_processes is None else num_processes
            process_index = state.process_index if process_index is None else process_index
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self._drop_last = _drop_last or bool(self.drop_last)
        self.slice_fn = slice_fn if slice_fn is not None else slice_batch
        total = self.batch_size
        if total is not None and total % num_processes != 0:
            raise ValueError(
                f"DataLoaderDispatcher cuts every batch process 0 reads into {num_processes} equal slices, but the "
                f"batch size {total} is not divisible by {num_processes}. Use a batch size that is a multiple of "
                f"{num_processes} (with split_batches=False, prepare() reads batch_size x num_processes for you)."
            )
        self._per_process = (total // num_processes) if total is not None else None
        # Built over a batch sampler (a custom one, see `GlobalBatchSampler`): every batch process 0
        # reads is one step of all processes, cut into equal slices whatever its length.
        self._slices_each_batch = total is None and self.batch_sampler is not None
        if skip_batches:
            self._view_skip = int(skip_batches)
        # Upstream's sub-meshes of a tensor/context-parallel mesh; a mesh is refused above, so all None.
        self.torch_device_mesh = torch_device_mesh
        self.submesh_tp = _submesh(torch_device_mesh, "tp")
        self.submesh_dp = _submesh(torch_device_mesh, "dp")
        self.submesh_fsdp = _submesh(torch_device_mesh, "fsdp")

    @property
    def state(self) -> Any:
        """The process's :class:`~accelerate.state.PartialState` (the process group batches go over)."""
        from accelerate.state import PartialState

        return PartialState()

    # --- what the mixin needs ---------------------------------------------------------------------
    @property
    def _num_shards(self) -> int:
        return self.num_processes

    @property
    def _split_batches(self) -> bool:
        return self.split_batches

    def _shuffle_sampler(self) -> Any:
        return getattr(self.batch_sampler, "sampler", None) if self.batch_sampler is not None else None

    def _syncs_shuffle(self) -> bool:
        # Only process 0 reads, so its shuffle is the only one that matters: nothing to align.
        return False

    # --- facts --------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return max(super().__len__() - (self._view_skip or 0), 0)

    @property
    def total_batch_size(self) -> int:
        if self._slices_each_batch:
            return int(getattr(self.batch_sampler, "batch_size", None) or 1)
        return int(self.batch_size or 1)

    @property
    def total_dataset_length(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    # --- process 0 ------------------------------------------------------------------------------------
    def _read(self, skip: int, keep_rng: bool = False) -> Iterator[tuple[Any, bool, int]]:
        """Process 0: (batch, is_last, duplicates) for each batch of the epoch after ``skip``."""
        with preserve_global_rng(keep_rng):
            iterator = super().__iter__()
        first: Any = _END
        for _ in range(skip):
            skipped = next(iterator, _END)
            if skipped is _END:
                raise ValueError(
                    f"cannot skip {skip} batches: this epoch has fewer (skip_first_batches needs "
                    "num_batches <= len(dataloader))"
                )
            if first is _END:
                first = skipped
        current = next(iterator, _END)
        while current is not _END:
            if first is _END:
                first = current
            upcoming = next(iterator, _END)
            is_last = upcoming is _END
            batch, duplicates = current, 0
            size = None
            if self._per_process is not None:
                size = self._per_process * self.num_processes
            elif self._slices_each_batch:
                length = batch_length(batch)
                size = -(-length // self.num_processes) * self.num_processes
                if not is_last and size != length:
                    raise ValueError(
                        f"dispatch_batches=True cuts every batch into {self.num_processes} equal slices, but the batch "
                        f"sampler gave a batch of {length} samples, not divisible by {self.num_processes} (only the "
                        "last batch may be short). Use batches of a multiple of the number of processes."
                    )
            if is_last and self.even_batches and not self._drop_last and size is not None:
                length = batch_length(batch)
                if 0 < length < size:
                    batch, duplicates = pad_batch(batch, first, size), size - length
            yield batch, is_last, duplicates
            current = upcoming

    def _comm_device(self) -> torch.device:
        device = current_communicator().device
        if device.type == "cuda" and self.device is not None and self.device.type == "cuda":
            return self.device
        return device

    def _send(self, reader: Iterator[tuple[Any, bool, int]] | None) -> Any:
        """One step: process 0 sends the layout then the tensors; every process returns the batch."""
        header: Any = None
        tensors: list[torch.Tensor] = []
        error: Exception | None = None
        if reader is not None:
            try:
                batch, is_last, duplicates = next(reader, (_END, True, 0))
                if batch is not _END:

                    def _slot(tensor: torch.Tensor) -> _Slot:
                        tensors.append(tensor)
                        return _Slot(len(tensors) - 1, tuple(tensor.shape), tensor.dtype)

                    header = (recursively_apply(_slot, batch), is_last, duplicates)
            except Exception as exc:  # noqa: BLE001 - agreed on with every process below, then raised
                if self.num_processes == 1 or not current_communicator().is_distributed:
                    raise
                error = exc
        # One exchange carries process 0's header, or its failure to every process.
        info = agree_on_failure(error, what="Reading the dispatched batch", payload=header)[0]
        if info is None:
            return _END
        layout, is_last, duplicates = info
        received = self._broadcast_tensors(layout, tensors)
        return recursively_apply(
            lambda s: received[s.position], layout, test_type=lambda x: isinstance(x, _Slot)
        ), (
            is_last,
            duplicates,
        )

    def _broadcast_tensors(self, layout: Any, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        slots: list[_Slot] = []
        recursively_apply(slots.append, layout, test_type=lambda x: isinstance(x, _Slot))
        if not current_communicator().is_distributed:
            return tensors
        device = self._comm_device()
        by_dtype: dict[torch.dtype, list[_Slot]] = defaultdict(list)
        for slot in slots:
            by_dtype[slot.dtype].append(slot)
        received: list[torch.Tensor] = [torch.empty(0)] * len(slots)
        # One flat buffer per dtype: a batch of many tensors still costs few collectives.
        for dtype, group in by_dtype.items():
            sizes = [int(torch.Size(s.shape).numel()) for s in group]
            if tensors:
                flat = torch.cat([tensors[s.position].reshape(-1).to(device) for s in group])
            else:
                flat = torch.empty(sum(sizes), dtype=dtype, device=device)
            current_communicator().broadcast_(flat, src=0)
            for slot, piece in zip(group, torch.split(flat, sizes)):
                received[slot.position] = piece.view(slot.shape)
        return received

    # --- iteration ------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        start, restoring = self._begin_iteration()
        self.begin()
        reader = (
            self._read(start.batches, restoring and start.batches > 0) if self.process_index == 0 else None
        )
        per, rank = self._per_process, self.process_index
        try:
            while True:
                sent = self._send(reader)
                if sent is _END:
                    break
                batch, (is_last, duplicates) = sent
                if self._slices_each_batch:
                    per = -(-batch_length(batch) // self.num_processes)
                part = batch if per is None else self.slice_fn(batch, slice(per * rank, per * (rank + 1)))
                if is_last:
                    self.end_of_dataloader = True
                    self._remainder = duplicates
                if per is None or batch_length(part) > 0 or batch_length(batch) == 0:
                    self._count_batch()
                    yield self._to_device(part)
                if is_last:
                    break
            self._finish_iteration()
        finally:
            self.end()


def _submesh(mesh: Any, name: str) -> Any:
    """``mesh[name]`` when ``mesh`` has a dimension ``name``, else None."""
    if mesh is None or name not in (getattr(mesh, "mesh_dim_names", None) or ()):
        return None
    return mesh[name]
