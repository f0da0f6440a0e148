"""The estimate against the measured peak of both ranks of DeepSpeed ZeRO-1/2/3 runs (2 CPU processes).

Each rank profiles its whole run, from before the Accelerator and the model are made, so that what
DeepSpeed allocates beside the model's parameters (its fp32 master partition, flat gradient
partition, gradient bucket, the parameters ZeRO-3 keeps gathered) is in the measurement; the peak is
the CPU allocator's live bytes during the third step (tests/planning/zero_payload.py). The small
Llama of test_validation_two_ranks.py, AdamW, fp32; bucket sizes as accelerate fills a transformers
model's "auto" (hidden_size**2), and once DeepSpeed's own 500M-element default, which dominates.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.deepspeed_pool import DeepSpeedPool
from tests.helpers.pool import WorkerPool
from tests.planning.zero_payload import zero_peak

pytest.importorskip("transformers")
pytest.importorskip("deepspeed", reason="the ZeRO validation needs deepspeed (make test installs it)")

ENV = {"DS_ACCELERATOR": "cpu"}


@pytest.fixture(scope="module")
def ds_pool() -> Iterator[WorkerPool]:
    # A pool of its own: DeepSpeed keeps process-wide state that other tests' workers need not carry.
    pool = DeepSpeedPool(2)  # imports DeepSpeed without mlflow (tests/helpers/deepspeed_pool.py)
    yield pool
    pool.close()


@pytest.mark.parametrize(
    ("stage", "batch", "sequence", "buckets"),
    [
        (1, 4, 128, "auto"),
        (2, 4, 128, "auto"),
        (3, 4, 128, "auto"),
        (1, 8, 256, "auto"),
        (2, 8, 256, "auto"),
        (3, 8, 256, "auto"),
        (2, 4, 128, "default"),
    ],  # fmt: skip
)
def test_both_ranks_of_a_zero_step_peak_within_15_percent_of_the_estimate(
    ds_pool: WorkerPool, stage: int, batch: int, sequence: int, buckets: str
) -> None:
    for rank, figures in enumerate(
        ds_pool.run(zero_peak, stage, batch, sequence, buckets, env=ENV, timeout=300)
    ):
        estimated, measured = figures["estimated"], figures["measured"]
        print(f"ZeRO-{stage} rank {rank}: estimated {estimated}, measured {measured}")
        assert abs(estimated - measured) / measured < 0.15, (rank, estimated, measured)
