"""DeepSpeed ZeRO 1-3 on two real CPU processes (DS_ACCELERATOR=cpu, gloo): the five-line loop matches torch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.backends import deepspeed_payloads as payloads
from tests.helpers.pool import WorkerPool

pytest.importorskip("deepspeed", reason="DeepSpeed tests need deepspeed (make test installs it)")

ENV = {"DS_ACCELERATOR": "cpu"}


@pytest.fixture(scope="module")
def ds_pool() -> Iterator[WorkerPool]:
    # A pool of its own: DeepSpeed keeps process-wide state (its comm backend) that other tests' workers need not carry.
    pool = WorkerPool(2)
    yield pool
    pool.close()


def _close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], atol: float) -> None:
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=atol, rtol=0, msg=name)


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_matches_full_batch_torch(ds_pool: WorkerPool, stage: int) -> None:
    results = ds_pool.run(payloads.train, stage, env=ENV, timeout=300)
    want = payloads.reference_weights(batch_size=8)
    for rank in results:
        assert rank["distributed_type"] == "DEEPSPEED"
        # DeepSpeed flattens the parameters into one buffer per group and averages the gradients
        # with a pre-division by the world size: the same AdamW math, rounded differently (1e-5).
        _close(rank["weights"], want, atol=1e-5)


@pytest.mark.parametrize("stage", [2, 3])
def test_save_state_load_state_continues_identically(ds_pool: WorkerPool, tmp_path: Any, stage: int) -> None:
    folder = str(tmp_path / "ckpt")
    straight = ds_pool.run(payloads.save_midway, stage, folder, 3, env=ENV, timeout=300)
    # upstream's layout: the engine's own checkpoint under pytorch_model/, inside our committed folder
    names = {p.relative_to(folder).as_posix() for p in Path(folder).rglob("*") if p.is_file()}
    assert "accelerate_manifest.json" in names and "random_states_1.pkl" in names
    assert any(n.startswith("pytorch_model/") and "optim_states" in n for n in names)
    resumed = ds_pool.run(payloads.resume, stage, folder, 3, env=ENV, timeout=300)
    for a, b in zip(straight, resumed, strict=True):
        assert a["lr"] == b["lr"]
        _close(b["weights"], a["weights"], atol=0)
    other = 2 if stage == 3 else 3
    messages = ds_pool.run(payloads.load_into_stage, other, folder, env=ENV, timeout=300)
    assert all("ZeRO stage" in m and str(stage) in m and str(other) in m for m in messages), messages
