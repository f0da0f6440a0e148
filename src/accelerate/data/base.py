"""What every prepared loader shares: device placement, epoch bookkeeping, RNG sync and its state.

A prepared loader keeps its position in a `LoaderProgress`. The object is shared with the views
that `skip_first_batches` makes, so finishing the resumed epoch through a view moves the original
loader on to the next epoch — the next ``for batch in loader`` shuffles exactly as an uninterrupted
run would.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from accelerate.collectives.communicator import current_communicator
from accelerate.collectives.operations import broadcast, broadcast_object_list
from accelerate.collectives.rng import synchronize_rng_states
from accelerate.data.samplers import SeedableRandomSampler, TorchOrderRandomSampler, get_sampler, set_sampler
from accelerate.data.twin import BaseDataLoader
from accelerate.state.gradient import GradientState
from accelerate.utils.tree import send_to_device


@contextlib.contextmanager
def preserve_global_rng(active: bool) -> Iterator[None]:
    """Leaves torch's global CPU RNG untouched by the block when ``active``.

    torch's DataLoader draws its workers' base seed from the global RNG each time an iteration
    starts. A run resumed mid-epoch starts a second iteration of that epoch, which the original run
    did not: without this, that extra draw would shift every later random number (dropout, ...).
    """
    if not active:
        yield
        return
    state = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(state)


STATE_FORMAT = 1


def check_no_device_mesh(torch_device_mesh: Any, owner: str) -> None:
    """Tensor/context-parallel data loading (batches shared within a mesh dimension) is not implemented."""
    if torch_device_mesh is not None:
        from accelerate.utils.errors import NotAvailableYetError

        raise NotAvailableYetError(
            f"{owner}(torch_device_mesh=...) is not supported: leave it None. With a ParallelismConfig, "
            "accelerator.prepare(loader) already shards by the data-parallel coordinate (every rank of a "
            "tensor-parallel group gets the same batches)."
        )


def _shuffle_seed(sampler: Any) -> int | None:
    """The seed from which every epoch's order of ``sampler`` follows (None: none yet, or no shuffle)."""
    if isinstance(sampler, SeedableRandomSampler):
        return sampler.initial_seed
    if isinstance(sampler, TorchOrderRandomSampler):
        return sampler.base_seed
    return None


def _seed_of_process_zero(seed: int) -> int:
    # Once per loader, at its first shuffled epoch: later epochs derive their seed from this one.
    # One int64 broadcast (an object broadcast would pickle and send twice).
    holder = torch.tensor([seed], dtype=torch.int64, device=current_communicator().device)
    broadcast(holder, from_process=0)
    return int(holder.item())


@dataclasses.dataclass
class ResumePoint:
    """Where the next iteration starts: per-process batches, and underlying batches when known."""

    batches: int = 0
    base_batches: int | None = None


@dataclasses.dataclass
class LoaderProgress:
    """The loader's place in training. ``epoch`` is the current (or next) epoch's index."""

    epoch: int = 0
    batches_yielded: int = 0
    base_batches_consumed: int = 0
    in_epoch: bool = False
    pending: ResumePoint | None = None  # set by load_state_dict, used by the next iteration
    pending_generator_state: torch.Tensor | None = None
    generator_state_at_epoch_start: torch.Tensor | None = None


class DataLoaderStateMixin:
    """Tells ``GradientState`` when an iteration begins and ends, and keeps the end-of-data facts.

    ``end_of_dataloader`` is True while the epoch's last batch is in use and ``remainder`` is the
    number of samples duplicated into the last round (-1 while unknown); gradient accumulation and
    ``gather_for_metrics`` read them through ``GradientState``. A custom loader calls ``begin()``
    before its first batch and ``end()`` after its last (also when the iteration is abandoned).
    """

    end_of_dataloader: bool = False
    _remainder: int = -1
    gradient_state: GradientState

    @property
    def remainder(self) -> int:
        """Samples duplicated into the last round of the epoch (-1 while unknown)."""
        return self._remainder

    @remainder.setter
    def remainder(self, value: int) -> None:
        self._remainder = int(value)

    def reset(self) -> None:
        """Forgets the previous epoch's end: not at the end, remainder unknown."""
        self.end_of_dataloader = False
        self._remainder = -1

    def begin(self) -> None:
        """Resets, and makes this loader the one ``GradientState`` follows."""
        self.reset()
        self._state_for_gradients()._add_dataloader(self)

    def end(self) -> None:
        """Hands ``GradientState`` back to the enclosing loader (if any)."""
        self._state_for_gradients()._remove_dataloader(self)

    def _state_for_gradients(self) -> GradientState:
        state = getattr(self, "gradient_state", None)
        if state is None:  # a custom loader that never set one
            state = self.gradient_state = GradientState()
        return state


class PreparedLoaderMixin(DataLoaderStateMixin):
    """Behaviour common to `DataLoaderShard` and `DataLoaderDispatcher` (both DataLoader subclasses)."""

    device: torch.device | None
    rng_types: list[str] | None
    synchronized_generator: torch.Generator | None
    use_stateful_dataloader: bool
    base_dataloader = BaseDataLoader()
    _progress: LoaderProgress
    _non_blocking: bool
    _view_skip: int | None
    _step_base_batches: int

    def _init_prepared(
        self,
        device: torch.device | str | None,
        rng_types: Sequence[str] | None,
        synchronized_generator: torch.Generator | None,
        non_blocking: bool,
        use_stateful_dataloader: bool,
        gradient_state: GradientState | None,
    ) -> None:
        self.device = torch.device(device) if device is not None else None
        self.rng_types = [str(t) for t in rng_types] if rng_types is not None else None
        self.synchronized_generator = synchronized_generator
        self._non_blocking = non_blocking
        self.use_stateful_dataloader = use_stateful_dataloader
        self.gradient_state = gradient_state if gradient_state is not None else GradientState()
        self.end_of_dataloader = False
        self._progress = LoaderProgress()
        self._view_skip = None
        self._remainder = -1
        self._step_base_batches = 0
        # Moving a CPU batch "to the CPU" still walks the structure; skip it on the hot path.
        self._moves_batches = self.device is not None and self.device.type != "cpu"
        self.batch_transform: Callable[[Any], Any] | None = None

    # --- to be provided by the loader ---------------------------------------------------------
    @property
    def _num_shards(self) -> int:
        raise NotImplementedError

    @property
    def _split_batches(self) -> bool:
        raise NotImplementedError

    @property
    def _base_batches_per_step(self) -> int | None:
        """Underlying batch-sampler batches per step, when the position can be kept in them."""
        return None

    @property
    def _base_batch_size(self) -> int | None:
        """Samples in one underlying batch (None when unknown): turns the position into samples."""
        return None

    def _shuffle_sampler(self) -> Any:
        return None

    # --- public attributes ----------------------------------------------------------------------
    def get_sampler(self) -> Any:
        """The index sampler under this loader's (sharded) batch sampler; see `get_sampler`."""
        return get_sampler(self)

    def set_sampler(self, sampler: Any) -> None:
        """Makes ``sampler`` the index sampler this loader's batches are drawn from (next epoch on)."""
        set_sampler(self, sampler)

    @property
    def iteration(self) -> int:
        """Index of the current (or next) epoch."""
        return self._progress.epoch

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration epoch ``epoch`` (and tells the sampler and the dataset).

        A position restored by `load_state_dict` survives ``set_epoch`` of the same epoch, so the
        common ``loader.set_epoch(epoch)`` at the top of a resumed epoch loop stays exact.
        """
        progress = self._progress
        if epoch != progress.epoch or progress.in_epoch:
            progress.pending = None
            progress.pending_generator_state = None
        progress.epoch = int(epoch)
        progress.in_epoch = False
        self._propagate_epoch(epoch)

    def _propagate_epoch(self, epoch: int) -> None:
        targets = [getattr(self, "batch_sampler", None), getattr(self, "dataset", None)]
        for target in targets:
            set_epoch = getattr(target, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)
        sampler = self._shuffle_sampler()
        if sampler is not None and callable(getattr(sampler, "set_epoch", None)):
            sampler.set_epoch(epoch)

    # --- epoch bookkeeping ------------------------------------------------------------------------
    def _begin_iteration(self) -> tuple[ResumePoint, bool]:
        """Decides the epoch and the start position; returns (start, whether it is a restore)."""
        progress = self._progress
        restoring = progress.pending is not None
        start = progress.pending or ResumePoint()
        if self._view_skip is not None:
            # skip_first_batches counts from the start of the epoch; it replaces a restored
            # position instead of adding to it (old scripts call it after load_state too).
            per_step = self._base_batches_per_step
            base = self._view_skip * per_step if per_step is not None else None
            start = ResumePoint(self._view_skip, base)
        elif not restoring and progress.in_epoch:
            progress.epoch += 1  # the previous iteration was abandoned: this is a new epoch
        progress.pending = None
        progress.in_epoch = True
        progress.batches_yielded = start.batches
        per_step = self._base_batches_per_step
        if start.base_batches is None and per_step is not None:
            start.base_batches = start.batches * per_step
        progress.base_batches_consumed = start.base_batches or 0
        self._step_base_batches = per_step or 0  # read once per epoch, not per batch
        self.end_of_dataloader = False
        self._remainder = -1
        self._sync_randomness(restoring)
        self._propagate_epoch(progress.epoch)
        return start, restoring

    def _count_batch(self) -> None:
        progress = self._progress
        progress.batches_yielded += 1
        progress.base_batches_consumed += self._step_base_batches

    def _finish_iteration(self) -> None:
        progress = self._progress
        progress.epoch += 1
        progress.batches_yielded = 0
        progress.base_batches_consumed = 0
        progress.in_epoch = False

    def _to_device(self, batch: Any) -> Any:
        if self._moves_batches:
            batch = send_to_device(batch, self.device, non_blocking=self._non_blocking)  # type: ignore[arg-type]
        # A backend's per-batch step (sequence parallelism keeps this rank's slice of each sequence).
        return self.batch_transform(batch) if self.batch_transform is not None else batch

    # --- randomness -------------------------------------------------------------------------------
    def _is_distributed(self) -> bool:
        return self._num_shards > 1 and current_communicator().is_distributed

    def _syncs_shuffle(self) -> bool:
        """Whether every process shuffles (and so must shuffle alike)."""
        return self._is_distributed()

    def _sync_randomness(self, restoring: bool) -> None:
        """At an iteration's start: process 0's shuffle state to all (first time / restore); ``rng_types``."""
        sampler = self._shuffle_sampler()
        seedable = isinstance(sampler, SeedableRandomSampler)
        generator = self.synchronized_generator
        # Once the processes share the seed / generator state, they stay in step by themselves:
        # the permutation depends only on (seed, epoch), and every process draws the same amount
        # from an identical generator. So one broadcast per loader (and after a restore) suffices,
        # which keeps the collective out of every epoch's start.
        first_time = not getattr(self, "_shuffle_synced", False)
        if self._syncs_shuffle() and (seedable or generator is not None) and (first_time or restoring):
            self._shuffle_synced = True
            # One collective carries both, so a shuffled epoch costs one broadcast.
            payload: list[Any] = [
                sampler.initial_seed if seedable else None,
                generator.get_state() if generator is not None else None,
            ]
            broadcast_object_list(payload, from_process=0)
            if seedable:
                sampler.initial_seed = int(payload[0])
            if generator is not None:
                generator.set_state(payload[1])
        progress = self._progress
        if generator is not None:
            if restoring and progress.pending_generator_state is not None:
                generator.set_state(progress.pending_generator_state)
            progress.generator_state_at_epoch_start = generator.get_state()
        if isinstance(sampler, TorchOrderRandomSampler):
            # It seeds itself when the epoch's first batch is drawn (PyTorch's moment): hand it the
            # saved state to replay, and the way to agree with process 0 on its first draw (made
            # once per loader: later epochs derive their seed from that one, with no collective).
            if restoring and progress.pending_generator_state is not None:
                sampler.pending_state = progress.pending_generator_state
            sampler.sync_seed = _seed_of_process_zero if self._syncs_shuffle() else None
        progress.pending_generator_state = None
        if self.rng_types and self._is_distributed():
            others = [t for t in self.rng_types if t != "generator"]
            if others:
                synchronize_rng_states(others)

    # --- state ------------------------------------------------------------------------------------------
    def adjust_state_dict_for_prefetch(self) -> None:
        """Nothing to adjust: `state_dict` counts the batches handed out, never the one fetched ahead.

        (Upstream corrects a torchdata state for its prefetching here; ours is exact as it is.)
        """

    def state_dict(self) -> dict[str, Any]:
        """The loader's position: a plain dict of ints / tensors, safe to `torch.save`.

        Keys: ``epoch``, ``batches_yielded`` (this process, this epoch), ``base_batches_consumed``
        (underlying batches, -1 if not tracked), ``samples_consumed`` (samples of the epoch's global
        order consumed by all processes together, -1 if not tracked: the world-size independent
        position, see `load_state_dict`), ``num_processes``, ``split_batches``, ``seed`` (the seed every
        epoch's shuffle follows from: a `SeedableRandomSampler`'s, or the default sampler's base seed
        once its first epoch has drawn it; else None), ``generator_state`` (the shuffle generator's
        state at the start of the epoch, else None) and ``format``. With the seed, the state alone
        decides the order of the current and every later epoch, whatever the global RNG holds.
        """
        progress = self._progress
        epoch, batches, base = progress.epoch, progress.batches_yielded, progress.base_batches_consumed
        generator = self.synchronized_generator
        sampler = self._shuffle_sampler()
        if progress.in_epoch and isinstance(sampler, TorchOrderRandomSampler):
            generator_state = sampler.state_at_epoch_start
        else:
            generator_state = progress.generator_state_at_epoch_start if progress.in_epoch else None
        if progress.in_epoch and self.end_of_dataloader:
            # The last batch is out: resuming starts the next epoch, not an empty one.
            epoch, batches, base, generator_state = epoch + 1, 0, 0, None
        elif not progress.in_epoch and progress.pending is not None:
            batches = progress.pending.batches
            base = progress.pending.base_batches if progress.pending.base_batches is not None else -1
            generator_state = progress.pending_generator_state
        if generator_state is None and generator is not None:
            generator_state = generator.get_state()
        per_step = self._base_batches_per_step
        base_size = self._base_batch_size
        tracked = per_step is not None and base >= 0
        return {
            "format": STATE_FORMAT,
            "epoch": epoch,
            "batches_yielded": batches,
            "base_batches_consumed": base if per_step is not None else -1,
            "samples_consumed": base * base_size if tracked and base_size is not None else -1,
            "num_processes": self._num_shards,
            "split_batches": self._split_batches,
            "seed": _shuffle_seed(sampler),
            "generator_state": generator_state.clone() if generator_state is not None else None,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores a position saved by `state_dict`; the next iteration continues from it exactly.

        With ``use_stateful_dataloader=False`` only the epoch and the shuffle state are restored
        (skip the done batches with `skip_first_batches`). A state saved with another number of
        processes is re-split by underlying batch (map-style datasets); where that is impossible
        (iterable datasets, dispatched batches) a mid-epoch state raises.

        The re-split rule (elastic training): the epoch's global order depends only on the seed, and
        the position is the number of samples of that order consumed (``samples_consumed``). The
        resumed epoch starts at the first sample not consumed, whatever the new number of processes:
        process ``i`` takes underlying batches ``p + i, p + i + N, ...`` from there (``p`` = the
        position in underlying batches). A position that is not a multiple of the new round (``N``
        batches) is fine: the new rounds are simply offset from the old ones, and no sample is
        skipped or repeated. ``batches_yielded`` becomes the new processes' steps, rounded up. The
        position must be a whole number of underlying batches: a state saved with another batch
        size whose position falls inside a batch of this loader raises.
        """
        self.check_state_dict(state_dict)
        batches = int(state_dict["batches_yielded"]) if self.use_stateful_dataloader else 0
        base_saved = self._saved_base_batches(state_dict)
        base: int | None = base_saved if base_saved >= 0 and self.use_stateful_dataloader else None
        per_step = self._base_batches_per_step
        # check_state_dict made sure a state from another number of processes has both counts.
        if int(state_dict["num_processes"]) != self._num_shards and batches and base is not None and per_step:
            batches = -(-base // per_step)  # the new processes' steps, rounded up
        if base is None and self._base_batches_per_step is not None:
            base = batches * self._base_batches_per_step
        progress = self._progress
        progress.epoch = int(state_dict["epoch"])
        progress.in_epoch = False
        progress.pending = ResumePoint(batches, base)
        generator_state = state_dict.get("generator_state")
        progress.pending_generator_state = generator_state.clone() if generator_state is not None else None
        sampler = self._shuffle_sampler()
        seed = state_dict.get("seed")
        if seed is not None and isinstance(sampler, SeedableRandomSampler):
            sampler.initial_seed = int(seed)
        elif isinstance(sampler, TorchOrderRandomSampler):
            # No seed: saved before the first epoch drew one (or by an older version): draw it then.
            sampler.base_seed = int(seed) if seed is not None else None

    def check_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Raises what `load_state_dict` would raise for ``state_dict``; changes nothing.

        A checkpoint load calls it while it checks the files, so a position that cannot be re-split
        over this number of processes stops the load before any object has changed.

        Raises:
            KeyError: ``state_dict`` is not a loader state.
            ValueError: it was saved with another ``split_batches``, mid-epoch with another number
                of processes by a loader that cannot re-split its position (iterable or dispatched
                data), or at a position inside a batch of this loader.
        """
        missing = {"epoch", "batches_yielded", "num_processes"} - set(state_dict)
        if missing:
            raise KeyError(
                f"not a loader state (missing {sorted(missing)}); pass what loader.state_dict() returned"
            )
        if bool(state_dict.get("split_batches", self._split_batches)) != self._split_batches:
            raise ValueError(
                f"the loader state was saved with split_batches={state_dict['split_batches']} but this loader "
                f"uses split_batches={self._split_batches}; use the same DataLoaderConfiguration to resume"
            )
        batches = int(state_dict["batches_yielded"]) if self.use_stateful_dataloader else 0
        base_saved = self._saved_base_batches(state_dict)
        saved_processes = int(state_dict["num_processes"])
        if saved_processes == self._num_shards or not batches:
            return
        if base_saved < 0 or self._base_batches_per_step is None:
            raise ValueError(
                f"this loader state was saved mid-epoch (after {batches} batches per process) with "
                f"{saved_processes} process{'es' if saved_processes != 1 else ''}, but this run has "
                f"{self._num_shards} process{'es' if self._num_shards != 1 else ''}; this loader (iterable "
                "or dispatched data) cannot re-split a position over another number of processes. Resume "
                f"with the same number of processes ({saved_processes}), from a checkpoint saved at an epoch "
                "boundary, or with a map-style dataset (its position re-splits over any number of processes)."
            )

    def _saved_base_batches(self, state_dict: dict[str, Any]) -> int:
        """The saved position in this loader's underlying batches (-1: not tracked).

        Read from ``samples_consumed`` when both it and this loader's batch size are known (so a
        state saved with a different underlying batch size still lands on the right sample), else
        from ``base_batches_consumed`` (states written before samples were counted).
        """
        samples = int(state_dict.get("samples_consumed", -1))
        size = self._base_batch_size
        if samples < 0 or not size:
            return int(state_dict.get("base_batches_consumed", -1))
        base, inside = divmod(samples, size)
        if inside:
            raise ValueError(
                f"the loader state was saved {samples} samples into epoch {state_dict['epoch']}, which is "
                f"inside a batch of this loader (underlying batches of {size} samples); resume with a batch "
                f"size that divides {samples} (the one the state was saved with), or from an epoch boundary"
            )
        return base
