"""One voice per DDP replica group: only group rank 0 talks to torchft, and tells its group.

torchft 0.2.0 pairs each process with the same-rank process of every other group (the cross-group
gloo group of rank ``r`` lives under ``.../torchft/{quorum_id}/{r}``), so groups of different
sizes cannot meet: a rank with no peer in a smaller group waits for it. In a DDP group every
process holds the whole gradient after the in-group reduction and the same weights, so one process
can speak for the group. Here group rank 0 (the **leader**) is the group's only torchft member (a
manager of one process): it takes part in the quorum, the cross-group all-reduce and healing, and
broadcasts to the rest of its group (the **followers**, over the group's own process group):

- after each quorum, the step's facts (participants, this group's rank in the quorum, step,
  batches committed, whether the quorum failed), then, if the leader just healed, the live state
  it received (as ``wire.py`` tensors: bytes, never pickle);
- in the comm hook, the gradient averaged across the groups (``Runtime.comm_hook``);
- at the optimizer step, the commit decision and the new step and position.

Groups of any sizes then meet as groups of one, which also sends one copy of the gradient across
groups instead of one per process. FSDP2 groups keep torchft's per-rank model (each process holds
its own shard), so they need equal sizes (``manager.py`` checks the layouts).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from accelerate.backends.fault_tolerance import wire

# The facts the leader broadcasts after each quorum, in this order (int64).
_FACTS = ("participants", "rank", "step", "committed", "errored", "healed", "fatal")


class FollowerError(RuntimeError):
    """The group's leader reported a quorum error; on a follower this stands for torchft's."""


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def broadcast_state(state: Any, device: torch.device) -> None:
    """Group rank 0: sends ``state`` (a healing state tree) to the rest of its group."""
    header, tensors = wire.encode(state)
    length = torch.tensor([len(header)], dtype=torch.int64, device=device)
    dist.broadcast(length, src=0)
    dist.broadcast(torch.frombuffer(bytearray(header), dtype=torch.uint8).to(device), src=0)
    for tensor in tensors:
        if tensor.numel():
            dist.broadcast(_bytes(tensor.to(device)), src=0)


def receive_state(device: torch.device) -> Any:
    """A follower: the state tree group rank 0 sends with ``broadcast_state``."""
    length = torch.zeros(1, dtype=torch.int64, device=device)
    dist.broadcast(length, src=0)
    size = int(length.item())
    if not 0 < size <= wire.MAX_HEADER_BYTES:
        raise ValueError(f"the group leader announced a healing header of {size} bytes; refused.")
    header = torch.empty(size, dtype=torch.uint8, device=device)
    dist.broadcast(header, src=0)
    tree, specs = wire.tensor_specs(header.cpu().numpy().tobytes())
    tensors = []
    for dtype, shape in specs:
        out = torch.empty(shape, dtype=dtype, device=device)
        if out.numel():
            dist.broadcast(_bytes(out), src=0)
        tensors.append(out)
    return wire.decode(tree, tensors)


class _Done:
    """A completed torchft Work (a follower's cross-group exchange is its leader's)."""

    def wait(self, _timeout: Any = None) -> bool:
        return True


class GroupLeader:
    """Group rank 0's torchft manager, its facts and healed state broadcast to the group."""

    def __init__(self, manager: Any, state_dict: Callable[[], Any], device: torch.device) -> None:
        self._manager = manager
        self._state_dict = state_dict
        self._device = device
        self._healed = False  # this quorum healed this process (Runtime.load_state_dict says so)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._manager, name)  # current_step, batches_committed, errored, ...

    def mark_healed(self) -> None:
        """torchft just loaded a peer's state here: the group receives it after the quorum."""
        self._healed = True

    def start_quorum(self) -> None:
        from accelerate.backends.fault_tolerance.manager import GroupSizeMismatch

        self._healed = False
        manager = self._manager
        manager.start_quorum()
        error = getattr(manager.errored(), "original_exception", None)
        rank = manager.participating_rank()
        facts = [
            manager.num_participants(), -1 if rank is None else rank, manager.current_step(),
            manager.batches_committed(), manager.errored() is not None, self._healed,
            isinstance(error, GroupSizeMismatch),
        ]  # fmt: skip
        dist.broadcast(torch.tensor(facts, dtype=torch.int64, device=self._device), src=0)
        if self._healed:
            broadcast_state(self._state_dict(), self._device)

    def should_commit(self) -> bool:
        decision = bool(self._manager.should_commit())
        facts = [decision, self._manager.current_step(), self._manager.batches_committed()]
        dist.broadcast(torch.tensor(facts, dtype=torch.int64, device=self._device), src=0)
        return decision


class GroupFollower:
    """A DDP group's process other than rank 0: torchft's answers as its leader broadcasts them."""

    def __init__(self, load_state_dict: Callable[[Any], None], device: torch.device) -> None:
        self._load_state_dict = load_state_dict
        self._device = device
        self._facts = dict.fromkeys(_FACTS, 0)
        self.last_receive_s: float | None = None  # how long the last healing broadcast took

    def start_quorum(self) -> None:
        facts = torch.zeros(len(_FACTS), dtype=torch.int64, device=self._device)
        dist.broadcast(facts, src=0)
        self._facts = dict(zip(_FACTS, facts.tolist()))
        if self._facts["fatal"]:
            from accelerate.backends.fault_tolerance.manager import GroupSizeMismatch

            raise GroupSizeMismatch(
                "fault tolerance: the replica groups of this quorum cannot meet (see the error of "
                "this group's rank 0)."
            )
        if self._facts["healed"]:
            started = time.perf_counter()
            self._load_state_dict(receive_state(self._device))
            self.last_receive_s = time.perf_counter() - started

    def num_participants(self) -> int:
        return int(self._facts["participants"])

    def participating_rank(self) -> int | None:
        rank = int(self._facts["rank"])
        return None if rank < 0 else rank

    def current_step(self) -> int:
        return int(self._facts["step"])

    def batches_committed(self) -> int:
        return int(self._facts["committed"])

    def errored(self) -> Any:
        return FollowerError("the group leader's quorum failed") if self._facts["errored"] else None

    def allreduce(self, _tensor: torch.Tensor, **_kwargs: Any) -> _Done:
        return _Done()  # the leader exchanges; the hook then receives its result (Runtime.comm_hook)

    def should_commit(self) -> bool:
        facts = torch.zeros(3, dtype=torch.int64, device=self._device)
        dist.broadcast(facts, src=0)
        decision, step, committed = facts.tolist()
        self._facts.update(step=step, committed=committed)
        return bool(decision)

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._facts.update(step=int(state["step"]), committed=int(state["batches_committed"]))

    def shutdown(self, wait: bool = False) -> None: ...
