"""The estimate against the measured peak of both ranks of an ep=2 run of a tiny Qwen3-MoE (2 gloo
processes, CPU), measured as test_validation.py measures (tests/planning/ep_payload.py).

Each rank reads its own batch, so the router gives the ranks' experts different loads (one rank's
experts got 4,490 rows of the 4,096 an even router sends them, the other's 3,702); the estimate assumes
an even router, and the more loaded rank's peak is 2-5% above it.
"""

from __future__ import annotations

import pytest

from tests.helpers.pool import WorkerPool
from tests.planning.ep_payload import moe_peak

pytest.importorskip("transformers")


@pytest.mark.parametrize(("batch", "sequence"), [(4, 128), (8, 256)])
def test_both_ranks_of_an_ep2_step_peak_within_15_percent_of_the_estimate(
    pool2: WorkerPool, batch: int, sequence: int
) -> None:
    for rank, figures in enumerate(pool2.run(moe_peak, {"ep_size": 2}, batch, sequence, timeout=300)):
        estimated, measured = figures["estimated"], figures["measured"]
        print(f"rank {rank}: estimated {estimated}, measured {measured}")
        assert abs(estimated - measured) / measured < 0.15, (rank, estimated, measured)
