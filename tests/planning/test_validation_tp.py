"""The estimate against the measured peak of both ranks of a tp=2 run (2 gloo processes, CPU).

Measured as test_validation.py measures (the CPU allocator's live bytes during the third step, plus
the local parameters and optimizer states before it), on the Llama of test_validation_two_ranks.py
with transformers' tensor-parallel plan applied by hand (tests/planning/tp_payload.py). The peak
varies by up to 14% run to run: gloo frees each forward all-reduce's buffers when its worker releases
the asynchronous work, so none to four ``tokens x hidden`` buffers per block are still held when
backward starts; the estimate counts one per block (``tp_forward_buffers``): -7.4% to +5.2% of the
twenty peaks measured, and within 15% even with four per block held.
"""

from __future__ import annotations

import pytest

from tests.helpers.pool import WorkerPool
from tests.planning.tp_payload import tp_peak

pytest.importorskip("transformers")


@pytest.mark.parametrize(("batch", "sequence"), [(4, 128), (8, 256)])
def test_both_ranks_of_a_tp2_step_peak_within_15_percent_of_the_estimate(
    pool2: WorkerPool, batch: int, sequence: int
) -> None:
    for rank, figures in enumerate(pool2.run(tp_peak, batch, sequence)):
        estimated, measured = figures["estimated"], figures["measured"]
        print(f"rank {rank}: estimated {estimated}, measured {measured}")
        assert abs(estimated - measured) / measured < 0.15, (rank, estimated, measured)
