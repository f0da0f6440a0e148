"""DeepSpeed ZeRO 1-3 on two real CPU processes (DS_ACCELERATOR=cpu, gloo): the five-line loop matches torch."""

from __future__ import annotations

from collections.abc import Iterator

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
