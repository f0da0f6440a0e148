"""One replica group's step protocol: quorum, draw, average, commit or skip.

A step runs in this order (the user's loop does not change):

1. **Quorum** (``begin_step``), before the batch is drawn: torchft's lighthouse decides which groups
   take part; a group that is behind (restarted) receives the live state from a peer here, between
   steps, so nothing it computes mixes old and new weights.
2. **Draw** (``draw``): the epoch is a sequence of batches; batch ``p + r`` goes to the group with
   participating rank ``r``, where ``p`` counts the batches committed so far this epoch. ``p`` lives
   in torchft's state (``batches_committed``), so every group in the quorum, a healed one included,
   agrees on it.
3. **Average** (``comm_hook``): inside a group of several processes, the mean of its processes'
   gradients (each trained its part of the group's batch); then across the groups, each process with
   the same-rank processes of the others (torchft's per-rank model), the sum divided by the number of
   groups that trained a real batch. An error (a peer died mid-exchange) is reported to the manager, never raised, and the
   gradient is zeroed.
4. **Commit** (``optimizer_step``): the optimizer steps only if every group's ``should_commit``
   agrees; otherwise the step is skipped and logged, and its batches go back to the pool (``p`` did
   not move, so the next quorum draws them again). A committed step records the batches it
   really trained (``batches_stepped``): the learning-rate schedule advances by that many.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from accelerate.utils.fault_tolerance import FaultToleranceKwargs

logger = logging.getLogger(__name__)


@dataclass
class StepRecord:
    """What one step of this group drew and whether it was committed (``Runtime.records``)."""

    step: int  # torchft's step count when the step began
    position: int  # batches committed this epoch before the step
    participants: int
    rank: int  # this group's participating rank
    batch: (
        int | None
    )  # the batch (with accumulation G: the slot of G batches) this group trained; None: padding
    contributors: int  # groups that trained a real batch this step
    committed: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Runtime:
    """The manager of this replica group and the objects whose state heals with it."""

    def __init__(self, settings: FaultToleranceKwargs, group_rank: int = 0, group_size: int = 1) -> None:
        if not 0 <= group_rank < group_size:
            raise ValueError(f"Runtime(group_rank={group_rank}) must lie in [0, group_size={group_size}).")
        self.settings = settings
        # This process within its replica group (the launch's processes; torch.distributed's default
        # group is the group's own), and how many processes the group has.
        self.group_rank, self.group_size = group_rank, group_size
        self.device = torch.device("cpu")  # where the group's own collectives run (the strategy's)
        # FSDP2 inside the group: the models' parameters are DTensor shards, exchanged and healed by
        # shard (``shards.py``) instead of through DDP's comm hook.
        self.sharded = False
        # What the groups of a quorum compare before they meet, and checkpoints record (the strategy
        # names an FSDP2/HSDP group's mesh; DDP groups of any sizes meet through their rank 0).
        self.layout = "DDP (any size)"
        self.models: list[torch.nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.schedulers: list[Any] = []  # AcceleratedSchedulers: their state heals with the weights
        # The batches the last committed step trained (its quorum's real ones, not the weight-0
        # extras of an epoch's last round): the schedule advances by it (Strategy.batches_stepped).
        self.batches_stepped = 0
        self.epoch = 0
        self.epoch_start = 0  # batches_committed when this epoch began
        self.records: list[StepRecord] = []
        self.manager: Any = None
        self.transport: Any = None
        self._store: Any = None
        self._open = False  # a quorum is started and its step not yet decided
        self._decision: bool | None = None
        self._exchanged = False  # FSDP2 inside the group: this step's gradient shards were exchanged
        self._weight = 1.0
        self._contributors = 1
        self._resumed: tuple[int, int] | None = None  # load_state's (step, batches committed)

    # -- the manager -------------------------------------------------------------------------
    @property
    def one_voice(self) -> bool:
        """A DDP group of several processes: only its rank 0 talks to torchft (``group.py``)."""
        return not self.sharded and self.group_size > 1

    @property
    def last_heal_s(self) -> float | None:
        """How long this process's last healing took (from a peer group, or from its group's leader)."""
        source = self.transport if self.transport is not None else self.manager
        value = getattr(source, "last_receive_s", None)
        return None if value is None else float(value)

    def connect(self) -> Any:
        """Builds this process's torchft manager now, if not yet built (else the first step does); returns it.

        From here on the group heartbeats to the lighthouse, and only a heartbeating group counts
        as live: a quorum waits up to the lighthouse's join timeout for a live group that has not
        asked yet, but forms at once without a group that is not heartbeating. So whoever needs the
        groups' first quorum to include every group (the chaos check's workers, before their
        start barrier) connects each first. FSDP2 inside the group: a collective of the group (its
        rank 0 sends the rendezvous port), so every process of the group calls it at the same point.
        """
        if self.manager is None:
            from accelerate.backends.fault_tolerance.group import GroupFollower, GroupLeader
            from accelerate.backends.fault_tolerance.manager import bound_store, build_manager

            if self.one_voice and self.group_rank > 0:
                self.manager = GroupFollower(self.load_state_dict, self.device)
            else:
                # The group's rendezvous store: group rank 0 hosts it, the others learn its port from rank 0.
                port = torch.zeros(1, dtype=torch.int64, device=self.device)
                if self.group_rank == 0:
                    self._store = bound_store(self.settings.bind_address)
                    port[0] = int(self._store.port)
                if self.sharded and self.group_size > 1:
                    import torch.distributed as dist

                    dist.broadcast(port, src=0)
                # FSDP2: every process is a torchft member (its own shard); DDP: rank 0 alone, as a group of one.
                members = self.group_size if self.sharded else 1
                layout = self.layout
                manager, self.transport = build_manager(
                    self.settings, state_dict=self.state_dict, load_state_dict=self.load_state_dict,
                    store_port=int(port.item()), group_rank=self.group_rank, group_size=members, layout=layout,
                )  # fmt: skip
                self.manager = (
                    GroupLeader(manager, self.state_dict, self.device) if self.one_voice else manager
                )
            if self._resumed is not None:
                self.manager.load_state_dict(
                    {"step": self._resumed[0], "batches_committed": self._resumed[1]}
                )
        return self.manager

    def state_dict(self) -> dict[str, Any]:
        """What a healing peer receives: weights, optimizer states and the epoch's position."""
        if self.sharded:
            from accelerate.backends.fault_tolerance.shards import local

            with torch.no_grad():
                return {
                    "models": [local(model.state_dict()) for model in self.models],
                    "optimizers": [local(optimizer.state_dict()) for optimizer in self.optimizers],
                    "schedulers": [scheduler.state_dict() for scheduler in self.schedulers],
                    "loader": {"epoch": self.epoch, "epoch_start": self.epoch_start},
                }
        return {
            "models": [model.state_dict() for model in self.models],
            "optimizers": [optimizer.state_dict() for optimizer in self.optimizers],
            "schedulers": [scheduler.state_dict() for scheduler in self.schedulers],
            "loader": {"epoch": self.epoch, "epoch_start": self.epoch_start},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        theirs = [len(state[kind]) for kind in ("models", "optimizers", "schedulers")]
        ours = [len(self.models), len(self.optimizers), len(self.schedulers)]
        if theirs != ours:
            raise ValueError(
                f"the healing peer trains {theirs[0]} model(s), {theirs[1]} optimizer(s) and {theirs[2]} "
                f"scheduler(s), this group {ours[0]}, {ours[1]} and {ours[2]}: every replica group must "
                "prepare the same objects."
            )
        if self.sharded:
            from accelerate.backends.fault_tolerance.shards import (
                as_sharded_optimizer_state,
                load_model_shards,
            )

            for model, weights in zip(self.models, state["models"]):
                load_model_shards(model, weights)
            for optimizer, optimizer_state in zip(self.optimizers, state["optimizers"]):
                optimizer.load_state_dict(as_sharded_optimizer_state(optimizer, optimizer_state))
        else:
            with torch.no_grad():
                for model, weights in zip(self.models, state["models"]):
                    model.load_state_dict(weights)
            for optimizer, optimizer_state in zip(self.optimizers, state["optimizers"]):
                optimizer.load_state_dict(optimizer_state)
        for scheduler, scheduler_state in zip(self.schedulers, state["schedulers"]):
            scheduler.load_state_dict(scheduler_state)
        self.epoch = int(state["loader"]["epoch"])
        self.epoch_start = int(state["loader"]["epoch_start"])
        mark_healed = getattr(self.manager, "mark_healed", None)
        if mark_healed is not None:
            mark_healed()  # a DDP group's leader: its followers receive this state after the quorum
        logger.info("healed: epoch %d, step %d", self.epoch, self.manager.current_step())

    def progress(self) -> tuple[int, int]:
        """(torchft's step, batches committed), what save_state records."""
        if self.manager is None:
            return self._resumed or (0, 0)
        return int(self.manager.current_step()), int(self.manager.batches_committed())

    def resume(self, step: int, batches_committed: int, epoch: int, epoch_start: int) -> None:
        """load_state: continue from a saved position (applied to the manager now or when it is built)."""
        self._resumed = (step, batches_committed)
        self.epoch, self.epoch_start = epoch, epoch_start
        if self.manager is not None:
            self.manager.load_state_dict({"step": step, "batches_committed": batches_committed})

    # -- the step ----------------------------------------------------------------------------
    def begin_step(self) -> None:
        """Starts the next step's quorum (once per step; healing happens in here)."""
        if self._open:
            return
        manager = self.connect()
        manager.start_quorum()
        from accelerate.backends.fault_tolerance.manager import GroupSizeMismatch  # loaded with the manager

        error = getattr(manager.errored(), "original_exception", None)
        if isinstance(error, GroupSizeMismatch):
            raise error  # a setup error, not a failure to ride out: no step could ever commit
        self._open = True
        self._decision = None
        self._exchanged = False
        self._weight, self._contributors = 1.0, max(1, manager.num_participants())

    def draw(self, num_batches: int) -> int | None:
        """The batch this group trains this step, or None when the epoch is over (see module doc)."""
        self.begin_step()
        manager = self.manager
        position = int(manager.batches_committed()) - self.epoch_start
        if position >= num_batches:
            self.epoch += 1
            self.epoch_start = int(manager.batches_committed())
            return None  # the open quorum serves the next epoch's first step
        participants = int(manager.num_participants())
        rank = int(manager.participating_rank() or 0)
        self._contributors = min(participants, num_batches - position)
        real = rank < self._contributors
        self._weight = 1.0 if real else 0.0
        batch = position + rank if real else None
        self.records.append(
            StepRecord(manager.current_step(), position, participants, rank, batch, self._contributors)
        )
        return batch if batch is not None else position  # a padding slot computes on a real batch, weight 0

    def comm_hook(self, _state: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        """DDP's gradient exchange across the replica groups, errors reported to the manager."""
        from torch.distributed import ReduceOp

        self.begin_step()
        manager = self.manager
        buffer: torch.Tensor = bucket.buffer()
        import torch.distributed as dist

        if self.group_size > 1:
            # Inside the group first (its own processes, each on its part of the group's batch), to
            # the group's rank 0, which alone exchanges across groups (group.py); a failure here
            # means a process of this group died, and the launcher restarts the group.
            dist.reduce(buffer, dst=0)
            buffer.div_(self.group_size)
        if self.group_rank == 0:
            if self._weight == 0.0:
                buffer.zero_()  # a padding slot adds nothing
            manager.allreduce(buffer, reduce_op=ReduceOp.SUM).wait()  # records an error instead of raising
            if manager.errored() is not None:
                buffer.zero_()  # possibly half-reduced; the step will not commit
            else:
                buffer.div_(self._contributors)
        if self.group_size > 1:
            dist.broadcast(buffer, src=0)  # the leader's average, to the whole group
        future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        future.set_result(buffer)
        return future

    def exchange_shards(self) -> None:
        """FSDP2 inside the group: each gradient shard, already averaged inside the group by FSDP2's
        reduce-scatter, averaged across the groups with the same-rank processes (one flat exchange,
        once per step: clip_grad_norm_ may run it before the optimizer step)."""
        from torch.distributed import ReduceOp

        if self._exchanged:
            return
        self.begin_step()
        self._exchanged = True

        from accelerate.backends.fault_tolerance.shards import sharded_grads

        grads = sharded_grads(self.optimizers)
        if not grads:
            return
        flat = torch.cat([grad.reshape(-1) for grad in grads])
        if self._weight == 0.0:
            flat.zero_()  # a padding slot adds nothing
        self.manager.allreduce(flat, reduce_op=ReduceOp.SUM).wait()  # records an error instead of raising
        if self.manager.errored() is not None:
            flat.zero_()  # possibly half-reduced; the step will not commit
        else:
            flat.div_(self._contributors)
        offset = 0
        with torch.no_grad():
            for grad in grads:
                grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
                offset += grad.numel()

    def optimizer_step(self, optimizer: torch.optim.Optimizer, step: Callable[[], Any]) -> Any:
        """Steps only if the quorum commits this step; otherwise logs the skip and drops the gradients."""
        if self._decision is None:
            self.begin_step()
            if self.sharded:
                self.exchange_shards()
            self._decision = bool(self.manager.should_commit())
            if self.records:
                self.records[-1].committed = self._decision
            self.batches_stepped = self._contributors if self._decision else 0
            self._open = False  # the next draw or forward starts the next quorum
            if not self._decision:
                logger.warning(
                    "fault tolerance: step %d skipped (the quorum did not commit: %s); its batches return "
                    "to the pool and the next quorum draws them again",
                    self.manager.current_step(), self.manager.errored() or "too few healthy replica groups",
                )  # fmt: skip
        if not self._decision:
            optimizer.zero_grad(set_to_none=True)
            return None
        return step()

    @property
    def step_was_skipped(self) -> bool:
        return self._decision is False

    def shutdown(self) -> None:
        if self.manager is not None:
            self.manager.shutdown(wait=False)
            self.manager = None
