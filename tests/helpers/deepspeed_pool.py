"""A worker pool for DeepSpeed payloads: its processes import DeepSpeed without importing mlflow.

``import deepspeed`` imports its autotuner, which imports mlflow when it is installed (``make test``
installs it for the tracking tests): measured here, DeepSpeed's import took 4.8-9.7 s with mlflow and
1.6-2.3 s without, in every process of every DeepSpeed pool. The autotuner only uses mlflow when it
runs (``deepspeed --autotuning``), never in these tests, and it treats a failed import as "not
installed". So each worker marks mlflow as not importable before its first payload (the whole
session long: the pool is only for DeepSpeed payloads, and none of them tracks to mlflow).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from tests.helpers.pool import WorkerPool


def forget_mlflow() -> bool:
    """Makes ``import mlflow`` fail in this worker (unless it was already imported); whether it did."""
    if "mlflow" in sys.modules:
        return False
    sys.modules["mlflow"] = None  # type: ignore[assignment]  # the import system's "not importable" mark
    return True


class DeepSpeedPool(WorkerPool):
    """A ``WorkerPool`` whose workers run ``forget_mlflow`` once after they start, before any payload."""

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        if not self._procs:  # a fresh start (the first call, or after a failure closed the pool)
            super().run(forget_mlflow)
        return super().run(fn, *args, **kwargs)
