"""What the collectives need to know about this process's group, from one owner.

``PartialState`` builds a :class:`Communicator` once the process group exists and binds it here
(state sits above collectives, so it hands the facts down instead of collectives reaching up).
Everything that communicates — the collectives, the data dispatcher, the loaders' shuffle sync — asks
:func:`current_communicator` rather than reading ``torch.distributed`` globals itself, so a new
backend (FSDP, DeepSpeed, XLA) changes one object, not every caller.

A script that creates its own process group and calls ``accelerate.utils.gather`` without any
``PartialState`` still works: then the communicator is derived from ``torch.distributed`` as it is.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

# How long debug mode waits for every process to reach the same collective before it names the
# missing ones. Short compared with the process group's own timeout (10 min unless set), long enough
# for ordinary imbalance; ACCELERATE_DEBUG_TIMEOUT (seconds) changes it.
DEFAULT_DEBUG_TIMEOUT = timedelta(seconds=60)

# Each communicator gets its own key space in the store, so keys left by an earlier one (tests that
# reuse a process group, an aborted round) are never mistaken for this one's. Processes bind their
# communicators in step (one per PartialState), so the n-th one has the same number everywhere.
_GENERATIONS = itertools.count(1)


@dataclass
class Communicator:
    """This process's view of its group: size, rank, where collective buffers live, debug checks.

    ``debug_round`` counts the collectives this process has checked in debug mode, so processes can
    tell which call each of them is at (``debug_generation`` keeps one communicator's keys apart from
    an earlier one's); they are the only mutable part and belong to this object.
    """

    world_size: int = 1
    rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    debug: bool = False
    debug_timeout: timedelta = DEFAULT_DEBUG_TIMEOUT
    group: Any = None  # a torch ProcessGroup; None means the default group
    debug_round: int = 0
    debug_generation: int = 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def can_check_shapes(self) -> bool:
        """Whether debug mode's cross-process shape checks can run (they need torch.distributed's store)."""
        return True

    # --- the primitives every collective in accelerate.collectives is built on ----------------
    # torch.distributed here; a backend with its own collectives (XLA) subclasses and overrides them.
    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every process's ``tensor`` (same shape everywhere) concatenated along dimension 0.

        The result is new data with no autograd history, whether or not ``tensor`` requires grad.
        """
        # The collective writes into ``out`` in place, which autograd does not follow: gloo in
        # torch 2.13 copies the input into views of ``out`` made under no_grad and raises when the
        # input requires grad. Sending the detached tensor (a view: no copy) sends the same values.
        tensor = tensor.detach()
        out = torch.empty(
            (self.world_size * tensor.shape[0], *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device
        )
        # torch 2.13 renamed all_gather_into_tensor (deprecated there, with a warning on every call);
        # looked up per call so the older name still serves torch < 2.13.
        gather_into = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather_into(out, tensor, group=self.group)
        return out

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        """Sums ``tensor`` over the processes, in place."""
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.group)

    def all_reduce_max_(self, tensor: torch.Tensor) -> None:
        """Element-wise maximum of ``tensor`` over the processes, in place."""
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group)

    def broadcast_(self, tensor: torch.Tensor, src: int) -> None:
        """Overwrites ``tensor`` with process ``src``'s, in place."""
        dist.broadcast(tensor, src=src, group=self.group)

    def all_gather_objects(self, obj: Any) -> list[Any]:
        """One picklable object from every process, in rank order."""
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast_objects_(self, objects: list[Any], src: int) -> None:
        """Replaces the items of ``objects`` by process ``src``'s, in place."""
        dist.broadcast_object_list(objects, src=src, group=self.group)

    def barrier(self) -> None:
        """Blocks until every process of the group reaches this call (``wait_for_everyone``)."""
        if self.device.type == "cuda":  # NCCL: the barrier runs on this process's GPU
            dist.barrier(group=self.group, device_ids=[self.device.index or 0])
        else:
            dist.barrier(group=self.group)


_BOUND: Communicator | None = None
# The communicator derived from torch.distributed when none is bound, kept while the group it
# describes is the same, so its debug round counter survives between calls.
_DERIVED: tuple[tuple[Any, ...], Communicator] | None = None


def bind_communicator(communicator: Communicator | None) -> None:
    """Makes ``communicator`` the one the collectives use (None: derive from torch.distributed)."""
    global _BOUND
    if communicator is not None:
        communicator.debug_generation = next(_GENERATIONS)
    _BOUND = communicator


def current_communicator() -> Communicator:
    """The bound communicator, or one describing ``torch.distributed``'s default group as it is now."""
    if _BOUND is not None:
        return _BOUND
    return _derived()


def collective_device(backend: str | None) -> torch.device:
    """Where tensors sent through ``backend`` must live: NCCL only moves CUDA tensors."""
    if backend == "nccl" and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _derived() -> Communicator:
    global _DERIVED
    from accelerate.config.env import read_launch_env

    launch = read_launch_env()
    debug = bool(launch.debug)
    timeout = _debug_timeout(launch.debug_timeout)
    if not (dist.is_available() and dist.is_initialized()):
        return Communicator(debug=debug, debug_timeout=timeout)
    key = (id(dist.group.WORLD), dist.get_world_size(), dist.get_rank(), debug, timeout)
    if _DERIVED is None or _DERIVED[0] != key:
        communicator = Communicator(
            world_size=dist.get_world_size(),
            rank=dist.get_rank(),
            device=collective_device(dist.get_backend()),
            debug=debug,
            debug_timeout=timeout,
            debug_generation=next(_GENERATIONS),
        )
        _DERIVED = (key, communicator)
    return _DERIVED[1]


def _debug_timeout(seconds: float | None) -> timedelta:
    if seconds is None:
        return DEFAULT_DEBUG_TIMEOUT
    if seconds <= 0:
        raise ValueError(
            f"ACCELERATE_DEBUG_TIMEOUT={seconds} must be a positive number of seconds (default "
            f"{int(DEFAULT_DEBUG_TIMEOUT.total_seconds())})."
        )
    return timedelta(seconds=seconds)


def make_communicator(
    *, world_size: int, rank: int, backend: str | None, debug: bool, debug_timeout: float | None
) -> Communicator:
    """What ``PartialState`` binds once its process group is up."""
    return Communicator(
        world_size=world_size,
        rank=rank,
        device=collective_device(backend),
        debug=debug,
        debug_timeout=_debug_timeout(debug_timeout),
    )
