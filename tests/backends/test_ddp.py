"""DDPStrategy: the hang watchdog's record of DDP's gradient all-reduce (two real gloo processes).

The end-to-end hang report is tested in tests/launch/test_hang_diagnosis.py; here, what the slot
holds during and after ``accelerator.backward``, and that users' comm hooks are left alone.
"""

from __future__ import annotations

from typing import Any

import torch

from accelerate import Accelerator
from accelerate.backends.ddp import GRADIENT_ALL_REDUCE
from accelerate.diagnostics.watchdog import SLOT
from tests.helpers.pool import WorkerPool


def _slot_during_backward() -> dict[str, Any]:
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(3, 2))
    seen: list[str | None] = []
    loss = model(torch.ones(4, 3)).sum()
    # Runs inside the backward, before DDP's reducer all-reduces the first bucket.
    loss.register_hook(lambda grad: seen.append(SLOT.operation))
    before = SLOT.count
    accelerator.backward(loss)
    return {"during": seen, "after": SLOT.operation, "entered": SLOT.count - before}


def test_accelerator_backward_under_ddp_is_recorded_in_the_slot_and_left(pool2: WorkerPool) -> None:
    results = pool2.run(_slot_during_backward)
    assert results == [{"during": [GRADIENT_ALL_REDUCE], "after": None, "entered": 1}] * 2


def _slot_during_accumulation() -> list[list[str | None]]:
    from accelerate.utils import GradientAccumulationPlugin

    accelerator = Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=2))
    model = accelerator.prepare(torch.nn.Linear(3, 2))
    per_step: list[list[str | None]] = []
    for _ in range(2):
        with accelerator.accumulate(model):
            seen: list[str | None] = []
            loss = model(torch.ones(4, 3)).sum()
            loss.register_hook(lambda grad, seen=seen: seen.append(SLOT.operation))
            accelerator.backward(loss)
            per_step.append(seen)
    return per_step


def test_an_off_step_backward_under_no_sync_is_not_recorded(pool2: WorkerPool) -> None:
    # The first micro-step does not all-reduce (no_sync): a long local backward there is no hang.
    assert pool2.run(_slot_during_accumulation) == [[[None], [GRADIENT_ALL_REDUCE]]] * 2


def _slot_left_when_backward_raises() -> str | None:
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(3, 2))
    loss = model(torch.ones(4, 3)).sum()

    def fail(grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("out of memory (simulated)")

    loss.register_hook(fail)
    try:
        accelerator.backward(loss)
    except RuntimeError:
        pass
    # A caught error (an out-of-memory retry) must not leave a stale record the watchdog would fire on.
    return SLOT.operation


def test_a_backward_that_raises_leaves_the_slot(pool2: WorkerPool) -> None:
    assert pool2.run(_slot_left_when_backward_raises) == [None, None]


def _user_comm_hook_after_prepare() -> list[Any]:
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(3, 2))
    buckets: list[int] = []

    def hook(state: object, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        buckets.append(bucket.index())
        return default_hooks.allreduce_hook(dist.distributed_c10d._get_default_group(), bucket)

    # DDP checks the annotations themselves, which `from __future__ import annotations` made strings.
    hook.__annotations__ = {
        "state": object,
        "bucket": dist.GradBucket,
        "return": torch.futures.Future[torch.Tensor],
    }
    model.register_comm_hook(None, hook)  # no hook of accelerate's is registered: this one is the first
    rank = accelerator.process_index
    accelerator.backward(model(torch.full((4, 3), float(rank + 1))).sum())
    return [buckets, model.module.weight.grad.tolist()]


def test_a_users_comm_hook_registered_after_prepare_runs(pool2: WorkerPool) -> None:
    (buckets0, grad0), (buckets1, grad1) = pool2.run(_user_comm_hook_after_prepare)
    assert buckets0 == buckets1 == [0]
    # The mean of both ranks' gradients (4 rows of 1s and of 2s): the hook all-reduced.
    assert grad0 == grad1 == [[6.0, 6.0, 6.0]] * 2
