"""The estimate against the measured peak of both ranks of a tp=2 run (2 gloo processes, CPU).

Measured as test_validation.py measures (the live bytes rebuilt from the profiler's allocation events
during the third step, plus the local parameters and optimizer states before it), on the Llama of
test_validation_two_ranks.py with transformers' tensor-parallel plan applied by hand
(tests/planning/tp_payload.py). Both ranks measured 20.79 MB at 4 x 128 and 68.90 MB at 8 x 256, the
estimate 4.9% and 6.0% more: it counts one all-reduced block output per block as still held
(``tp_forward_buffers``). The profiler's own running count, measured before, drifted up by a
different amount on every run (it never subtracts a block gloo's worker thread frees), which read
as peaks varying by up to 20%: see tests/planning/allocations.py.
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
