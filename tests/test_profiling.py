"""Accelerator.profile(): torch.profiler on CPU, settings from the call or the kwargs handler, traces per rank."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from accelerate import Accelerator, ProfileKwargs
from tests.helpers.pool import WorkerPool


def _work(model: torch.nn.Module) -> None:
    model(torch.randn(4, 8)).sum().backward()


def test_profile_records_the_block_on_cpu() -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(8, 8))
    with accelerator.profile(ProfileKwargs(activities=["cpu"], record_shapes=True)) as prof:
        _work(model)
    names = {event.key for event in prof.key_averages()}
    assert "aten::addmm" in names or "aten::linear" in names
    assert any(event.input_shapes for event in prof.key_averages(group_by_input_shape=True))


def test_profile_defaults_and_handler_from_kwargs_handlers(tmp_path: Path) -> None:
    handler = ProfileKwargs(output_trace_dir=str(tmp_path / "traces"))
    accelerator = Accelerator(cpu=True, kwargs_handlers=[handler])
    assert accelerator.profile_handler is handler
    with accelerator.profile() as prof:
        _work(torch.nn.Linear(8, 8))
    assert prof.key_averages()
    trace = json.loads((tmp_path / "traces" / "profile_0.json").read_text())
    assert trace["traceEvents"]


def test_profile_schedule_advances_with_step() -> None:
    ready: list[int] = []
    handler = ProfileKwargs(
        schedule_option={"wait": 1, "warmup": 1, "active": 2, "repeat": 1},
        on_trace_ready=lambda prof: ready.append(prof.step_num),
    )
    with Accelerator(cpu=True).profile(handler) as prof:
        for _ in range(5):
            _work(torch.nn.Linear(8, 8))
            prof.step()
    assert ready == [4]  # one cycle: wait 1 + warmup 1 + active 2 steps


def _traces(out: str) -> list[str]:
    accelerator = Accelerator(cpu=True)
    with accelerator.profile(ProfileKwargs(output_trace_dir=out)):
        _work(torch.nn.Linear(8, 8))
    accelerator.wait_for_everyone()
    return sorted(p.name for p in Path(out).iterdir())


def test_each_process_writes_its_own_trace(pool2: WorkerPool, tmp_path: Path) -> None:
    assert pool2.run(_traces, str(tmp_path)) == [["profile_0.json", "profile_1.json"]] * 2
