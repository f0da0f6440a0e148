"""LOMO through the Accelerator, with the real lomo-optim package: the update runs inside the backward."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState, PartialState
from accelerate.utils.imports import is_lomo_available

pytestmark = pytest.mark.skipif(not is_lomo_available(), reason="needs `pip install lomo-optim`")


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    for state in (AcceleratorState, GradientState, PartialState):
        state._reset_state()
    yield
    for state in (AcceleratorState, GradientState, PartialState):
        state._reset_state()


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def test_lomo_backward_is_one_sgd_step_and_step_after_it_changes_nothing() -> None:
    from lomo_optim import Lomo

    model, reference = _model(), _model()
    accelerator = Accelerator(cpu=True)
    prepared, optimizer = accelerator.prepare(model, Lomo(model, lr=0.05))
    assert accelerator.has_lomo_optimizer
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for _ in range(3):
        # LOMO takes the learning rate at each call (a scheduler's value): 0.1 here, not the 0.05 it was built with.
        accelerator.lomo_backward(nn.functional.mse_loss(prepared(x), y), learning_rate=0.1)
        after_backward = copy.deepcopy(model.state_dict())
        optimizer.step()  # a loop written for other optimizers still calls it: nothing more happens
        optimizer.zero_grad()
        assert all(torch.equal(after_backward[k], v) for k, v in model.state_dict().items())
        reference_optimizer.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()
        reference_optimizer.step()
    for param, ref in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(param, ref)
        assert param.grad is None  # LOMO drops each gradient once applied


def test_backward_with_learning_rate_runs_lomo() -> None:
    # transformers' Trainer (optim="lomo") calls accelerator.backward(loss, learning_rate=lr). (AdaLomo
    # allocates its state with .cuda(): it needs a GPU.)
    from lomo_optim import Lomo

    model, reference = _model(), _model()
    accelerator = Accelerator(cpu=True)
    prepared, _ = accelerator.prepare(model, Lomo(model, lr=1e-2))
    x = torch.randn(8, 4)
    accelerator.backward(prepared(x).pow(2).mean(), learning_rate=0.1)
    reference(x).pow(2).mean().backward()
    with torch.no_grad():
        for param in reference.parameters():
            param -= 0.1 * param.grad
    for param, ref in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(param, ref)


def test_lomo_backward_refuses_gradient_accumulation() -> None:
    from lomo_optim import Lomo

    model = _model()
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    prepared, _ = accelerator.prepare(model, Lomo(model, lr=0.1))
    with pytest.raises(ValueError, match="cannot accumulate gradients"):
        accelerator.lomo_backward(prepared(torch.randn(2, 4)).sum(), 0.1)


def test_lomo_backward_without_a_lomo_optimizer_says_what_to_do() -> None:
    model = _model()
    accelerator = Accelerator(cpu=True)
    prepared, _ = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert not accelerator.has_lomo_optimizer
    with pytest.raises(ValueError, match=r"call accelerator.backward\(loss\)"):
        accelerator.lomo_backward(prepared(torch.randn(2, 4)).sum(), 0.1)
