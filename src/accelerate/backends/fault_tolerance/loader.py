"""The data loader of a fault-tolerant run: batches drawn from the epoch's committed position.

What "every sample once" means here. The epoch is one sequence of batches, the same in every
group (the order is seeded by ``FaultToleranceKwargs.data_seed`` and the epoch, never by a group's
own RNG). At each step the groups in the quorum take the next ``participants`` batches, one each;
the step either commits (those batches are trained, once, in the averaged gradient, and the
position moves past them) or is skipped (the position stays, and the next quorum, whoever is in
it, draws the same batches again). So across a failure:

- a batch whose step committed was trained exactly once, by the groups that were healthy when it
  was drawn, a group that died after contributing its gradient included;
- a batch whose group died before the step committed goes back to the pool and is drawn again;
- in the epoch's last round, when fewer batches remain than groups, the extra groups compute on
  a real batch with weight 0 and the average is over the real ones.

With gradient accumulation of ``G`` steps, a step's draw is ``G`` consecutive batches (the epoch's
batch count must then be a multiple of ``G``).

A replica group of several processes draws one batch per step like a group of one, and each of its
``W`` processes trains its own contiguous ``1/W`` of it (``batch_size`` is the group's batch, as with
``split_batches=True``; it must be at least ``W``, and an exact mean needs ``batch_size`` divisible by
``W``: an epoch's short last batch splits as evenly as it can). So the groups' sizes do not change
what an epoch trains.

An **evaluation pass** (an iteration begun while every prepared model is in eval mode) draws nothing
by committed position, since no step commits during it: it iterates the group's own prepared loader,
as a run without fault tolerance would. Each replica group evaluates the whole dataset, split over its
own processes (with ``even_batches`` padding), and ``gather_for_metrics`` gathers over those processes
only (the group's process group) and drops the padding of the last round.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import RandomSampler

from accelerate.backends.fault_tolerance.runtime import Runtime
from accelerate.data.base import STATE_FORMAT
from accelerate.utils.tree import send_to_device


def _innermost_batch_sampler(loader: Any) -> Any:
    """The user's own batch sampler under the shards prepare() wraps around it."""
    sampler: Any = getattr(loader, "batch_sampler", None)
    while getattr(sampler, "batch_sampler", None) is not None:
        sampler = sampler.batch_sampler
    return sampler


class CommittedBatchLoader:
    """Iterates the epoch's batches that this group draws at each step (see the module doc)."""

    def __init__(self, base: Any, runtime: Runtime, *, device: torch.device, accumulation: int = 1) -> None:
        batch_sampler = _innermost_batch_sampler(base)
        batch_size = getattr(base, "batch_size", None) or getattr(batch_sampler, "batch_size", None)
        sampler = getattr(batch_sampler, "sampler", None) or getattr(base, "sampler", None)
        dataset = getattr(base, "dataset", None)
        if (
            dataset is None
            or not isinstance(batch_size, int)
            or sampler is None
            or not hasattr(dataset, "__len__")
        ):
            raise TypeError(
                "prepare() with fault tolerance needs a map-style DataLoader with a batch_size (iterable "
                "datasets and custom batch samplers cannot be redrawn by position); got "
                f"{type(base).__name__} over {type(dataset).__name__}."
            )
        self.base = base
        self.dataset = dataset
        self.batch_size = batch_size
        self.collate_fn = base.collate_fn
        self.shuffle = isinstance(sampler, RandomSampler)
        self.drop_last = bool(getattr(batch_sampler, "drop_last", getattr(base, "drop_last", False)))
        self.runtime = runtime
        self.device = device
        self.accumulation = accumulation
        if batch_size < runtime.group_size:
            raise ValueError(
                f"with fault tolerance the DataLoader's batch_size ({batch_size}) is the replica group's "
                f"batch, split across its {runtime.group_size} processes: make it at least {runtime.group_size} "
                "(a multiple of it for an exact mean)."
            )
        batches = self.num_batches
        if batches % accumulation:
            raise ValueError(
                f"with fault tolerance and gradient_accumulation_steps={accumulation}, the epoch's {batches} "
                f"batches must be a multiple of {accumulation} (each step draws {accumulation} consecutive "
                "batches); change batch_size or the accumulation steps."
            )

    @property
    def num_batches(self) -> int:
        """The epoch's batches, across all replica groups."""
        size = len(self.dataset)
        return size // self.batch_size if self.drop_last else -(-size // self.batch_size)

    def __len__(self) -> int:
        return len(self.base) if self.evaluating else self.num_batches

    @property
    def evaluating(self) -> bool:
        """Every prepared model is in eval mode: an iteration now is an evaluation pass (module doc)."""
        models = self.runtime.models
        return bool(models) and not any(model.training for model in models)

    def _order(self) -> list[int]:
        size = len(self.dataset)
        if not self.shuffle:
            return list(range(size))
        generator = torch.Generator().manual_seed(self.runtime.settings.data_seed + self.runtime.epoch)
        return torch.randperm(size, generator=generator).tolist()

    def batch(self, index: int, order: list[int]) -> Any:
        """This process's part of batch ``index`` of the epoch whose sample order is ``order``."""
        indices = order[index * self.batch_size : (index + 1) * self.batch_size]
        rank, size = self.runtime.group_rank, self.runtime.group_size
        indices = indices[rank * len(indices) // size : (rank + 1) * len(indices) // size]
        samples = [self.dataset[i] for i in indices]
        return send_to_device(self.collate_fn(samples), self.device)

    def __iter__(self) -> Iterator[Any]:
        if self.evaluating:
            yield from self.base  # the group's plain loader: no quorum, nothing committed
            return
        slots = self.num_batches // self.accumulation
        epoch, order = -1, []
        while True:
            slot = self.runtime.draw(slots)
            if slot is None:
                return
            if self.runtime.epoch != epoch:  # healing may have moved this group to another epoch
                epoch, order = self.runtime.epoch, self._order()
            for micro in range(self.accumulation):
                yield self.batch(slot * self.accumulation + micro, order)

    # -- save_state / load_state: the position and the replica-group layout --------------------------
    def state_dict(self) -> dict[str, Any]:
        """The position as a plain loader's state, plus the fault-tolerant one under ``fault_tolerance``.

        The top-level keys are what a loader without fault tolerance reads (``data/base.py``): the
        epoch, the samples of its order committed, and the seed and generator state that make its
        sample order this run's (``data_seed + epoch``). So a plain run resumes the epoch from the
        first sample not committed, in the same order (see the module doc of ``loader.py``).
        """
        runtime, settings = self.runtime, self.runtime.settings
        step, committed = runtime.progress()
        epoch, done = runtime.epoch, committed - runtime.epoch_start  # slots of G batches committed
        if done >= self.num_batches // self.accumulation:
            epoch, done = epoch + 1, 0  # the epoch is over: a plain run starts the next one
        batches = done * self.accumulation
        generator = torch.Generator().manual_seed(settings.data_seed + epoch) if self.shuffle else None
        return {
            "fault_tolerance": {
                "replica_group_id": settings.replica_group_id, "num_replica_groups": settings.num_replica_groups,
                "min_replicas": settings.min_replicas, "step": step, "batches_committed": committed,
                "epoch": runtime.epoch, "epoch_start": runtime.epoch_start,
                "group_size": runtime.group_size, "group_layout": runtime.layout,
            },
            "format": STATE_FORMAT, "epoch": epoch, "batches_yielded": batches, "base_batches_consumed": batches,
            "samples_consumed": batches * self.batch_size, "num_processes": 1,
            # SeedableRandomSampler shuffles epoch e with seed + e, as this loader does; the default
            # sampler replays the resumed epoch from the generator state (later epochs: its own rule).
            "seed": settings.data_seed if self.shuffle else None,
            "generator_state": generator.get_state() if generator is not None else None,
        }  # fmt: skip

    def check_state_dict(self, state: dict[str, Any]) -> None:
        """Raises what ``load_state_dict`` would raise (a checkpoint load asks before loading anything)."""
        if not isinstance(state.get("fault_tolerance"), dict):
            raise ValueError(
                "this loader state was saved without fault tolerance, and a fault-tolerant run resumes only "
                "from a fault-tolerant checkpoint: its position counts batches committed across replica groups "
                "in an order seeded by FaultToleranceKwargs.data_seed, which a plain run's position and shuffle "
                "do not give. Load the weights alone (load_model / load_state_dict) and start the epoch afresh"
            )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.check_state_dict(state)
        saved = state["fault_tolerance"]
        if "step" not in saved:  # saved before the position moved under "fault_tolerance"
            saved = state
        self.runtime.resume(
            int(saved["step"]),
            int(saved["batches_committed"]),
            int(saved["epoch"]),
            int(saved["epoch_start"]),
        )
