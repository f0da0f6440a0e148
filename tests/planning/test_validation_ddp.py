"""The estimate against the measured peak of both ranks of a plain DDP run (2 gloo processes, CPU).

``Accelerator()`` with no parallelism config wraps the model in DistributedDataParallel, whose reducer
keeps gradient buckets beside the gradients; the estimate's layout for it is ``dp_replicate`` = the
world size (``accelerate estimate-memory --dp_replicate_size 2``). Measured over the whole run, from
before the model is built (tests/planning/ddp_payload.py), so the buckets are in the measurement.
"""

from __future__ import annotations

import pytest

from tests.helpers.pool import WorkerPool
from tests.planning.ddp_payload import ddp_peak

pytest.importorskip("transformers")


@pytest.mark.parametrize(("batch", "sequence", "bucket_view"), [(4, 128, False), (8, 256, True)])
def test_both_ranks_of_a_ddp_step_peak_within_15_percent_of_the_estimate(
    pool2: WorkerPool, batch: int, sequence: int, bucket_view: bool
) -> None:
    for rank, figures in enumerate(pool2.run(ddp_peak, batch, sequence, bucket_view, timeout=300)):
        estimated, measured = figures["estimated"], figures["measured"]
        print(f"DDP rank {rank}: estimated {estimated}, measured {measured} {figures}")
        assert figures["distributed_type"] == "DistributedType.MULTI_CPU", figures
        assert figures["bucket_view"] == bucket_view, figures
        assert abs(estimated - measured) / measured < 0.15, (rank, estimated, measured)
