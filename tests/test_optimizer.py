"""`accelerate.optimizer`'s module-level helpers: move_to_device and patch_optimizer_step."""

from __future__ import annotations

import torch

from accelerate.optimizer import AcceleratedOptimizer, move_to_device, patch_optimizer_step


def _stepped_adam() -> torch.optim.Adam:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    return optimizer


def test_move_to_device_moves_every_tensor_and_keeps_the_rest() -> None:
    state = _stepped_adam().state_dict()
    moved = move_to_device(state, torch.device("meta"))
    assert moved["param_groups"] == state["param_groups"]
    for key, entry in moved["state"].items():
        for name, value in entry.items():
            assert value.device.type == "meta"
            assert value.shape == state["state"][key][name].shape
    back = move_to_device(state, "cpu")
    torch.testing.assert_close(back["state"][0]["exp_avg"], state["state"][0]["exp_avg"])


def test_patch_optimizer_step_records_real_steps() -> None:
    inner = _stepped_adam()
    wrapped = AcceleratedOptimizer(inner)
    before = [p.detach().clone() for group in inner.param_groups for p in group["params"]]
    original = inner.step
    inner.step = patch_optimizer_step(wrapped, original)  # type: ignore[method-assign]
    wrapped._accelerate_step_called = False  # type: ignore[attr-defined]
    wrapped.step()
    assert wrapped._accelerate_step_called  # type: ignore[attr-defined]
    after = [p.detach() for group in inner.param_groups for p in group["params"]]
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))  # the real step ran
    assert inner.step.__wrapped__ is original  # type: ignore[attr-defined]


def test_patch_optimizer_step_passes_arguments_and_result() -> None:
    calls: list[tuple[tuple[object, ...], dict[str, object]]] = []

    def step(*args: object, **kwargs: object) -> str:
        calls.append((args, kwargs))
        return "result"

    holder = type("Holder", (), {})()
    patched = patch_optimizer_step(holder, step)
    assert patched(1, closure=None) == "result"
    assert calls == [((1,), {"closure": None})] and holder._accelerate_step_called is True


def test_accelerator_state_is_the_process_state() -> None:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    accelerator = Accelerator(cpu=True)
    optimizer = accelerator.prepare(torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1))
    assert (
        optimizer.accelerator_state is AcceleratorState() and optimizer.accelerator_state.num_processes == 1
    )
