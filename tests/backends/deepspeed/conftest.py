"""One pair of DeepSpeed worker pools (1 and 2 processes) for every module of this folder.

Each process pays for DeepSpeed once: its import, and at its first engine the CPU communication
op and the optimizer checks (with the pool's start, about 20 s of the first test of each module
when every module had pools of its own). The payloads only share what DeepSpeed keeps per process:
accelerate's state is reset between calls (tests/helpers/pool.py), as within one module before.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.deepspeed_pool import DeepSpeedPool
from tests.helpers.pool import WorkerPool


@pytest.fixture(scope="package")
def ds_pools() -> Iterator[dict[int, WorkerPool]]:
    # A pool of its own, not the suite's pool2: DeepSpeed's process-wide state (its comm backend)
    # need not reach the other tests' workers. Closed when the run leaves this folder.
    made: dict[int, WorkerPool] = {1: DeepSpeedPool(1), 2: DeepSpeedPool(2)}
    try:
        yield made
    finally:
        for pool in made.values():
            pool.close()
