"""Memory validations measure peaks in processes of their own.

A worker of the suite's shared pool has run other tests' payloads before (other models, other
meshes, their process groups and caches), and what those left behind showed up in a measured
step's allocations: 6–7 MB over the estimate in a full run, none alone. Each validation module gets
a fresh pair of processes instead (``pool2`` overridden here), closed when the module ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.pool import WorkerPool


@pytest.fixture(scope="module")
def pool2() -> Iterator[WorkerPool]:
    pool = WorkerPool(2)
    try:
        yield pool
    finally:
        pool.close()
