"""Runtime parity with upstream (issue 23): the environment's torch.compile settings, unwrapping the
mixed-precision forward, and objects passed to ``prepare`` more than once."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import torch

from accelerate import Accelerator
from accelerate.utils import DynamoBackend
from tests.training_helpers import make_model


def test_dynamo_backend_is_upstreams_enum(monkeypatch: pytest.MonkeyPatch) -> None:
    # Upstream's scripts compare `state.dynamo_plugin.backend` with DynamoBackend members.
    assert Accelerator().state.dynamo_plugin.backend == DynamoBackend.NO
    from accelerate.state import reset_state

    reset_state()
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "inductor")  # any case, as a user may write it
    assert Accelerator().state.dynamo_plugin.backend == DynamoBackend.INDUCTOR


def test_every_dynamo_variable_reaches_torch_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    # What upstream's launcher writes; a plain `python script.py` with these set compiles the same way.
    for name, value in {
        "BACKEND": "EAGER", "MODE": "reduce-overhead", "USE_FULLGRAPH": "True", "USE_DYNAMIC": "False",
        "USE_REGIONAL_COMPILATION": "False",
    }.items():  # fmt: skip
        monkeypatch.setenv(f"ACCELERATE_DYNAMO_{name}", value)
    seen: dict[str, Any] = {}

    def fake_compile(model: torch.nn.Module, **kwargs: Any) -> torch.nn.Module:
        seen.update(kwargs)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    Accelerator().prepare(make_model())
    assert seen == {"backend": "eager", "mode": "reduce-overhead", "fullgraph": True, "dynamic": False}


def test_unwrap_model_can_remove_the_fp32_wrapper() -> None:
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    original = make_model()
    model = accelerator.prepare(original)
    x = torch.randn(3, 8)
    assert "forward" in model.__dict__  # prepare wrapped it: autocast, then fp32 outputs
    kept = accelerator.unwrap_model(model, keep_fp32_wrapper=True)
    assert "forward" in kept.__dict__ and kept(x).dtype == torch.float32
    plain = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    assert plain is original and "forward" not in plain.__dict__  # the class's own forward again
    assert plain(x).dtype == torch.float32
    pickle.loads(pickle.dumps(plain))(x)  # a wrapped forward cannot be pickled; the plain one can


def test_unwrap_model_honours_upstreams_original_forward_attribute() -> None:
    # Upstream's name for the saved forward; code that wraps a forward by hand sets it too.
    from accelerate.utils import convert_outputs_to_fp32, extract_model_from_parallel

    model = make_model()
    model._original_forward = model.forward
    model.forward = convert_outputs_to_fp32(model.forward)
    model = extract_model_from_parallel(model, keep_fp32_wrapper=False)
    pickle.dumps(model)
    assert "_original_forward" not in model.__dict__


def test_an_object_prepared_twice_is_tracked_once() -> None:
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    prepared = accelerator.prepare(model, optimizer, scheduler)
    again = accelerator.prepare(*prepared)
    assert all(a is b for a, b in zip(again, prepared, strict=True))
    assert len(accelerator._models) == len(accelerator._optimizers) == len(accelerator._schedulers) == 1
    forward = prepared[0].forward
    assert accelerator.prepare_model(prepared[0]).forward is forward  # not wrapped a second time
