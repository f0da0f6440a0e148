"""Checks of gradient synchronisation on however many processes were launched (``accelerate launch test_sync.py``).

Every process feeds different data to a prepared ``RegressionModel``; the checks compare the
gradients with ``are_the_same_tensors`` and with the mean of every process's own gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from accelerate.accelerator import Accelerator
from accelerate.state import PartialState
from accelerate.test_utils.assertions import are_the_same_tensors
from accelerate.test_utils.scripts.test_ops import run_and_report
from accelerate.test_utils.training import RegressionModel


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(8, generator=gen)
    return x, 2 * x + 3


def _grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.stack([p.grad.detach().clone().cpu() for p in model.parameters() if p.grad is not None])


def _local_grads(rank: int, steps: list[int]) -> torch.Tensor:
    """The gradient one process's own data gives a plain (unprepared) model, summed over ``steps``."""
    model = RegressionModel(a=1, b=1)
    for step in steps:
        x, y = _batch(rank, step)
        F.mse_loss(model(x), y).backward()
    return _grads(model)


def _prepared_model(gradient_accumulation_steps: int = 1) -> tuple[torch.nn.Module, Accelerator]:
    accelerator = Accelerator(gradient_accumulation_steps=gradient_accumulation_steps)
    return accelerator.prepare(RegressionModel(a=1, b=1)), accelerator


def _all_ranks_mean(state: PartialState, steps: list[int], scale: float = 1.0) -> torch.Tensor:
    n = state.num_processes
    return torch.stack([_local_grads(r, steps) for r in range(n)]).mean(0) * scale


def test_no_sync(state: PartialState) -> None:
    """Inside ``no_sync`` each process keeps its own gradient; the next backward outside it syncs."""
    model, accelerator = _prepared_model()
    rank = state.process_index
    x, y = _batch(rank, 0)
    with accelerator.no_sync(model):
        accelerator.backward(F.mse_loss(model(x), y))
    local = _grads(model)
    _expect(
        torch.allclose(local, _local_grads(rank, [0])), "no_sync: gradient differs from this process's own"
    )
    if state.num_processes > 1:
        _expect(not are_the_same_tensors(local), "no_sync: gradients were synchronised across processes")
    x, y = _batch(rank, 1)
    accelerator.backward(F.mse_loss(model(x), y))
    synced = _grads(model)
    _expect(are_the_same_tensors(synced), "after no_sync: gradients differ across processes")
    # DDP averages at the synchronising backward the gradient accumulated so far on every process.
    expected = _all_ranks_mean(state, [0, 1])
    _expect(torch.allclose(synced, expected, atol=1e-6), f"after no_sync: expected {expected}, got {synced}")


def test_accumulate(state: PartialState) -> None:
    """``accumulate`` with 2 steps: no sync on the first micro-batch, the mean of both on the second."""
    model, accelerator = _prepared_model(gradient_accumulation_steps=2)
    rank = state.process_index
    for step in range(2):
        x, y = _batch(rank, step)
        with accelerator.accumulate(model):
            accelerator.backward(F.mse_loss(model(x), y))
        grads = _grads(model)
        if step == 0:
            expected_local = _local_grads(rank, [0]) / 2  # the loss is divided by the accumulation steps
            _expect(
                torch.allclose(grads, expected_local, atol=1e-6), "accumulate: first micro-step was not local"
            )
    _expect(are_the_same_tensors(grads), "accumulate: gradients differ across processes after the sync step")
    expected = _all_ranks_mean(state, [0, 1], scale=0.5)
    _expect(torch.allclose(grads, expected, atol=1e-6), f"accumulate: expected {expected}, got {grads}")


def main() -> int:
    return run_and_report([test_no_sync, test_accumulate])


if __name__ == "__main__":
    raise SystemExit(main())
