"""Issue 18: PartialState creates the process group itself, and an adopted group is reported honestly."""

from __future__ import annotations

import datetime
import os
import warnings

import torch.distributed as dist

from accelerate import PartialState
from accelerate.state import reset_state
from accelerate.state.process_group import is_own_group
from tests.helpers.pool import WorkerPool, free_port


def _who_made_the_group() -> dict[str, object]:
    state = PartialState()
    return {"own": is_own_group(), "backend": state.backend, "real": dist.get_backend()}


def test_partial_state_creates_the_group_in_the_pool(pool2: WorkerPool) -> None:
    # The pool only sets the launcher's variables: the group the tests use is PartialState's own.
    assert pool2.run(_who_made_the_group) == [{"own": True, "backend": "gloo", "real": "gloo"}] * 2


def _adopt_a_user_group(port: int) -> dict[str, object]:
    if dist.is_initialized():  # an earlier call's PartialState made one: the user's replaces it here
        dist.destroy_process_group()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=300),
    )  # fmt: skip
    asked = {"backend": "mpi", "timeout": datetime.timedelta(seconds=42), "init_method": "env://"}
    try:
        with warnings.catch_warnings(record=True) as first:
            warnings.simplefilter("always")
            state = PartialState(**asked)  # type: ignore[arg-type]
            backend = state.backend
        reset_state()
        with warnings.catch_warnings(record=True) as again:
            warnings.simplefilter("always")
            PartialState(**asked)  # type: ignore[arg-type]
        reset_state()
        with warnings.catch_warnings(record=True) as matching:
            warnings.simplefilter("always")
            PartialState(backend="gloo", timeout=datetime.timedelta(seconds=300))
        return {
            "backend": backend,
            "real": dist.get_backend(),
            "own": is_own_group(),
            "first": [str(w.message) for w in first],
            "again": len(again),
            "matching": len(matching),
        }
    finally:
        # The user's group goes; the next call's PartialState creates its own again.
        dist.destroy_process_group()


def test_adopted_group_reports_ignored_settings_once(pool2: WorkerPool) -> None:
    results = pool2.run(_adopt_a_user_group, free_port())
    for result in results:
        assert result["backend"] == result["real"] == "gloo"  # the group's real backend, not "mpi"
        assert result["own"] is False
        (message,) = result["first"]
        assert "backend='mpi' (the group uses 'gloo')" in message
        assert "timeout=0:00:42 (its timeout is 0:05:00)" in message
        assert "init_method='env://'" in message
        assert result["again"] == 0  # said once per process
        assert result["matching"] == 0  # what the group has is not "ignored"


def _own_group_request_differs() -> dict[str, object]:
    PartialState()  # creates the group, or reuses the one an earlier call created
    reset_state()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = PartialState(timeout=datetime.timedelta(seconds=7))
    return {"backend": state.backend, "warnings": [str(w.message) for w in caught]}


def test_own_group_with_a_different_request_is_reported(pool2: WorkerPool) -> None:
    for result in pool2.run(_own_group_request_differs):
        assert result["backend"] == "gloo"
        (message,) = result["warnings"]
        assert "timeout=0:00:07" in message and "already exists" in message


def _destroyed_group_is_let_go_once_unused() -> tuple[bool, bool]:
    import gc
    import weakref

    import torch

    from accelerate import Accelerator
    from accelerate.state.process_group import release_unused_groups

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    group = weakref.ref(dist.group.WORLD)
    accelerator.end_training()
    gc.collect()
    release_unused_groups()
    # The DDP wrapper still references the destroyed group, so accelerate keeps holding it: the
    # wrapper's death must never be what runs the group's destructor (under the GIL).
    held_while_used = group() is not None
    del model, accelerator
    gc.collect()
    release_unused_groups()
    return held_while_used, group() is not None


def test_destroyed_group_is_held_while_a_wrapper_uses_it(pool2: WorkerPool) -> None:
    assert pool2.run(_destroyed_group_is_let_go_once_unused) == [(True, False)] * 2
