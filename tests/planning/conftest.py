"""Memory validations measure peaks in processes of their own.

A worker of the suite's shared pool has run other tests' payloads before. That used to put 6-7 MB
on a measured step in a full run: the profiler's running count of allocated bytes carried the blocks
earlier profiles allocated and gloo's worker thread freed unseen (tests/planning/allocations.py),
and the measurement now rebuilds the live bytes from the step's own events instead. Each
validation module still gets a fresh pair of processes (``pool2`` overridden here), so that its
models and process groups do not stay in the shared workers; closed when the module ends.
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
