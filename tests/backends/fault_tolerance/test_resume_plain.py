"""A checkpoint of a fault-tolerant run resumes in a plain run: weights, optimizer, scheduler and the
epoch's position (the plain run continues the epoch from the first sample not committed, in the
same order). A plain checkpoint into a fault-tolerant run is refused before anything loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("torchft")

from accelerate import Accelerator, DataLoaderConfiguration, FaultToleranceKwargs  # noqa: E402
from accelerate.backends.fault_tolerance.manager import lighthouse_address, start_lighthouse  # noqa: E402
from accelerate.state import reset_state  # noqa: E402
from accelerate.storage.errors import CheckpointError  # noqa: E402
from tests.backends.fault_tolerance.resume_problem import (  # noqa: E402
    SAVE_AFTER,
    loss_of,
    make_loader,
    make_model,
    make_optimizer,
)

ROOT = Path(__file__).resolve().parents[3]


def _train(accelerator: Accelerator, steps: int | None = None) -> tuple[list[int], dict[str, torch.Tensor]]:
    """Prepares the problem and trains ``steps`` steps (None: to the epoch's end); the indices trained."""
    model = make_model()
    optimizer, scheduler = make_optimizer(model)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, make_loader())
    accelerator._test_objects = (model, optimizer, scheduler, loader)  # type: ignore[attr-defined]
    return _train_on(accelerator, steps)


def _fault_tolerant_checkpoint(tmp_path: Path) -> tuple[Path, list[int], dict[str, torch.Tensor]]:
    """A one-group fault-tolerant run: saved after SAVE_AFTER steps, then trained to the epoch's end."""
    server = start_lighthouse("127.0.0.1:0", min_replicas=1)
    try:
        settings = FaultToleranceKwargs(
            lighthouse_address=lighthouse_address(server, "127.0.0.1"), timeout_s=20
        )
        accelerator = Accelerator(cpu=True, kwargs_handlers=[settings])
        _, at_save = _train(accelerator, SAVE_AFTER)
        saved = Path(accelerator.save_state(str(tmp_path / "ckpt")))
        (tmp_path / "at_save.json").write_text(
            json.dumps({k: v.reshape(-1).tolist() for k, v in at_save.items()})
        )
        rest, weights = _train_on(accelerator)
        accelerator.strategy.release()
    finally:
        server.shutdown()
    return saved, rest, weights


def _train_on(
    accelerator: Accelerator, steps: int | None = None
) -> tuple[list[int], dict[str, torch.Tensor]]:
    """Trains the prepared problem ``steps`` more steps (None: to the epoch's end; 0: not even an
    iterator is made); the indices trained and the weights after."""
    model, optimizer, scheduler, loader = accelerator._test_objects  # type: ignore[attr-defined]
    seen: list[int] = []
    for index, batch in enumerate(loader if steps != 0 else ()):
        if index == steps:
            break
        accelerator.backward(loss_of(model, batch))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        seen += batch[0].tolist()
    return seen, {k: v.detach().clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seedable", [False, True])
def test_a_fault_tolerant_checkpoint_resumes_exactly_in_one_plain_process(
    tmp_path: Path, seedable: bool
) -> None:
    saved, rest, weights = _fault_tolerant_checkpoint(tmp_path)
    assert len(rest) == 32 - SAVE_AFTER * 4
    reset_state()
    accelerator = Accelerator(
        cpu=True, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=seedable)
    )
    _train(accelerator, 0)
    accelerator.load_state(str(saved))
    plain_rest, plain_weights = _train_on(accelerator)
    assert plain_rest == rest  # the same samples, in the same order, from the first not committed
    for key, value in weights.items():
        torch.testing.assert_close(plain_weights[key], value, rtol=1e-6, atol=1e-7)


@pytest.mark.timeout(240)
def test_a_fault_tolerant_checkpoint_resumes_under_two_plain_ddp_processes(tmp_path: Path) -> None:
    saved, rest, _ = _fault_tolerant_checkpoint(tmp_path)
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}")
    command = [
        sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--cpu", "--num_processes", "2",
        "--main_process_port", "0", "-m", "tests.backends.fault_tolerance.resume_worker", str(tmp_path), "plain",
    ]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=200)
    assert result.returncode == 0, result.stdout + result.stderr
    runs: list[dict[str, Any]] = [
        json.loads((tmp_path / f"plain_0_{rank}.json").read_text()) for rank in (0, 1)
    ]
    # Each step the two processes take the next two batches of the epoch's order, rank by rank.
    # (the epoch's 5 remaining batches: the last step's second one is the plain loader's even_batches
    # padding, drawn from the epoch's start as without fault tolerance)
    together = [i for a, b in zip(runs[0]["steps"], runs[1]["steps"]) for i in a + b]
    assert together[: len(rest)] == rest, (together, rest)
    assert len(together) == len(rest) + 4
    at_save = json.loads((tmp_path / "at_save.json").read_text())
    for run in runs:
        assert run["loaded_step"] == SAVE_AFTER  # the scheduler's count, restored
        assert run["loaded"] == at_save  # the weights (bit for bit)
    assert runs[0]["params"] == runs[1]["params"]


@pytest.mark.timeout(120)
def test_a_plain_checkpoint_is_refused_by_a_fault_tolerant_run_before_anything_loads(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    _train(accelerator, 2)
    saved = accelerator.save_state(str(tmp_path / "plain"))
    reset_state()
    server = start_lighthouse("127.0.0.1:0", min_replicas=1)
    try:
        settings = FaultToleranceKwargs(
            lighthouse_address=lighthouse_address(server, "127.0.0.1"), timeout_s=20
        )
        accelerator = Accelerator(cpu=True, kwargs_handlers=[settings])
        _train(accelerator, 0)
        model = accelerator._test_objects[0]  # type: ignore[attr-defined]
        before = {k: v.clone() for k, v in model.state_dict().items()}
        with pytest.raises(CheckpointError, match="saved without fault tolerance.*Nothing was loaded"):
            accelerator.load_state(saved)
        assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
        accelerator.strategy.release()
    finally:
        server.shutdown()
