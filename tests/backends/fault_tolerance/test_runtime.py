"""The step protocol's data rule without torchft: which batch each group draws, and what a skip does."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from accelerate import FaultToleranceKwargs
from accelerate.backends.fault_tolerance.runtime import Runtime


class _Manager:
    """torchft's manager as the runtime sees it: a quorum of ``participants``, this group at ``rank``."""

    def __init__(self, participants: int, rank: int) -> None:
        self.participants, self.rank = participants, rank
        self.step, self.committed, self.commit_next = 0, 0, True

    def start_quorum(self) -> None: ...
    def num_participants(self) -> int:
        return self.participants

    def participating_rank(self) -> int:
        return self.rank

    def batches_committed(self) -> int:
        return self.committed

    def current_step(self) -> int:
        return self.step

    def errored(self) -> Any:
        return None

    def should_commit(self) -> bool:
        if self.commit_next:
            self.step += 1
            self.committed += self.participants
        return self.commit_next


def _runtime(participants: int, rank: int) -> tuple[Runtime, _Manager]:
    runtime = Runtime(FaultToleranceKwargs(num_replica_groups=3))
    manager = _Manager(participants, rank)
    runtime.manager = manager
    return runtime, manager


def _step(runtime: Runtime) -> Any:
    return runtime.optimizer_step(torch.optim.SGD([torch.zeros(1, requires_grad=True)]), lambda: "stepped")


def test_each_group_draws_the_next_batch_by_its_rank_and_a_skip_redraws_the_same() -> None:
    runtime, manager = _runtime(participants=3, rank=1)
    assert runtime.draw(10) == 1
    assert _step(runtime) == "stepped"
    assert runtime.draw(10) == 4  # 3 batches committed, this group's is the second of the next 3
    manager.commit_next = False
    assert _step(runtime) is None and runtime.step_was_skipped
    manager.commit_next, manager.participants, manager.rank = True, 2, 1  # a group died
    assert runtime.draw(10) == 4  # the skipped step's batches are drawn again
    assert [r.committed for r in runtime.records] == [True, False, None]


def test_the_last_round_pads_with_weight_zero_and_averages_over_real_batches() -> None:
    runtime, manager = _runtime(participants=3, rank=2)
    manager.committed = 9
    assert runtime.draw(10) == 9  # only batch 9 is left: this group computes on it with weight 0
    assert runtime.records[-1].batch is None and runtime.records[-1].contributors == 1
    assert runtime._weight == 0.0
    _step(runtime)
    assert runtime.draw(10) is None and runtime.epoch == 1 and runtime.epoch_start == 12


def test_connect_builds_the_manager_once_before_any_step() -> None:
    # A DDP group's process other than rank 0 builds its follower (no torchft server, no collective);
    # a step's quorum then uses the same one (the chaos workers connect before their start barrier).
    pytest.importorskip("torchft")
    from accelerate.backends.fault_tolerance.group import GroupFollower

    runtime = Runtime(FaultToleranceKwargs(num_replica_groups=2), group_rank=1, group_size=2)
    follower = runtime.connect()
    assert (
        isinstance(follower, GroupFollower) and runtime.connect() is follower and runtime.manager is follower
    )
    assert runtime.records == []  # connecting starts no step
