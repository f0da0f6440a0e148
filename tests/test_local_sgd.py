"""LocalSGD on 2 real processes: local steps without gradient sync, parameters averaged every k steps."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from accelerate import Accelerator
from accelerate.local_sgd import LocalSGD
from tests.helpers.pool import WorkerPool
from tests.training_helpers import flat_params, global_batches, local_rows, make_model


def _train_local_sgd(steps: int, k: int) -> list[list[float]]:
    accelerator = Accelerator()
    rank, world = accelerator.process_index, accelerator.num_processes
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    snapshots = []
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=k) as local_sgd:
        for x, y in global_batches(steps, 8):
            x, y = local_rows(x, rank, world), local_rows(y, rank, world)
            accelerator.backward(F.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
            local_sgd.step()
            snapshots.append(flat_params(accelerator.unwrap_model(model)).tolist())
    snapshots.append(flat_params(accelerator.unwrap_model(model)).tolist())
    return snapshots


def _reference(steps: int, k: int) -> list[list[float]]:
    """The same schedule by hand: two local models, averaged every k steps and at the end."""
    models = [make_model(), make_model()]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    out = []
    for step, (x, y) in enumerate(global_batches(steps, 8), start=1):
        for rank, (m, opt) in enumerate(zip(models, optimizers)):
            F.mse_loss(m(local_rows(x, rank, 2)), local_rows(y, rank, 2)).backward()
            opt.step()
            opt.zero_grad()
        if step % k == 0:
            _average(models)
        out.append([flat_params(m).tolist() for m in models])
    _average(models)
    out.append([flat_params(m).tolist() for m in models])
    return out


@torch.no_grad()
def _average(models: list[torch.nn.Module]) -> None:
    for params in zip(*[m.parameters() for m in models]):
        mean = torch.stack([p for p in params]).mean(0)
        for p in params:
            p.copy_(mean)


def test_local_sgd_matches_local_training_with_periodic_averaging(pool2: WorkerPool) -> None:
    r0, r1 = pool2.run(_train_local_sgd, 5, 2)
    expected = _reference(5, 2)
    for step, (a, b, ref) in enumerate(zip(r0, r1, expected)):
        torch.testing.assert_close(
            torch.tensor(a), torch.tensor(ref[0]), msg=f"rank 0, after step {step + 1}"
        )
        torch.testing.assert_close(
            torch.tensor(b), torch.tensor(ref[1]), msg=f"rank 1, after step {step + 1}"
        )
    assert r0[0] != r1[0]  # after one local step the processes differ (no gradient all-reduce) ...
    assert r0[1] == r1[1] and r0[-1] == r1[-1]  # ... after k steps and at the end they agree


def test_local_sgd_in_one_process_changes_nothing() -> None:
    accelerator = Accelerator()
    model = accelerator.prepare(make_model())
    with LocalSGD(accelerator, model, local_sgd_steps=1) as local_sgd:
        local_sgd.step()
    assert not local_sgd.enabled and local_sgd.num_steps == 0


@pytest.mark.parametrize("steps", [0, -1, 1.5, True])
def test_local_sgd_steps_must_be_a_positive_int(steps: object) -> None:
    with pytest.raises(ValueError, match="local_sgd_steps"):
        LocalSGD(Accelerator(), make_model(), local_sgd_steps=steps)  # type: ignore[arg-type]


class _Host:
    """A stand-in for the Accelerator: LocalSGD asks only what ``LocalSGDHost`` lists."""

    def __init__(self, num_processes: int) -> None:
        self.num_processes = num_processes
        self.no_sync_entered: list[torch.nn.Module] = []

    def no_sync(self, model: torch.nn.Module) -> Any:
        self.no_sync_entered.append(model)
        return contextlib.nullcontext()

    def wait_for_everyone(self) -> None:
        pass

    def unwrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return model


def test_local_sgd_takes_any_host_with_the_calls_it_makes() -> None:
    model = torch.nn.Linear(1, 1)
    assert LocalSGD(_Host(1), model, local_sgd_steps=2).enabled is False  # one process: nothing to average
    host = _Host(2)
    local_sgd = LocalSGD(host, model, local_sgd_steps=2)
    local_sgd.__enter__()
    assert host.no_sync_entered == [model]
    local_sgd.__exit__(RuntimeError, RuntimeError("stop"), None)  # after an error: no averaging collective
