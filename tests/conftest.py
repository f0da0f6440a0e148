"""Shared fixtures: a session-wide pool of 2 gloo workers, state reset and leak checks."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator

import pytest
import torch

from tests.helpers.pool import WorkerPool

# The early_run fixture: commands that start with the session (tests/helpers/early.py).
# make test's lanes (tests/helpers/lanes.py): the check that the in-process lane starts no process.
pytest_plugins = ["tests.helpers.early", "tests.helpers.lanes"]

_POOLS: dict[int, WorkerPool] = {}

# The suite is written for CPU: on a machine with a GPU, unmarked tests (and the pool workers and
# launched scripts, which inherit the environment) still run on CPU, as they do in CI. Tests marked
# `cuda` / `multi_gpu` get the GPU back (see _device_for_marker below).
_FORCED_CPU = torch.cuda.is_available() and "ACCELERATE_USE_CPU" not in os.environ
if _FORCED_CPU:
    os.environ["ACCELERATE_USE_CPU"] = "true"
# MLflow's telemetry client starts on a background thread at first use and then sets
# _MLFLOW_TELEMETRY_SESSION_ID in os.environ, at a moment that depends on the machine's load: the
# leak check below would blame whichever test was running. The suite has no network anyway.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# comet_ml, once imported without this (transformers' integrations import it when it is installed),
# patches mlflow, tensorboard and torch at their import, and the next test that logs to one of them
# also writes a Comet offline experiment into the working directory (.cometml-runs/ in the checkout).
os.environ.setdefault("COMET_DISABLE_AUTO_LOGGING", "1")


def get_pool(world_size: int = 2) -> WorkerPool:
    if world_size not in _POOLS:
        _POOLS[world_size] = WorkerPool(world_size)
    return _POOLS[world_size]


@pytest.fixture
def pool2() -> WorkerPool:
    """Two real processes in a gloo group, shared across the session."""
    return get_pool(2)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """The 4- and 8-process pools serve one test folder each (tests/backends/parallel,
    tests/backends/dtensor_io): they close when the run leaves it. Every device mesh a test builds in
    them leaves gloo groups behind (torch's DTensor caches hold their names, so a pool cannot destroy
    them between calls), each with threads that wake on their own: after the N-D tests the idle
    4-process pool alone kept a quarter of a core busy for the rest of the session."""
    if nextitem is not None and nextitem.path.parent == item.path.parent:
        return
    for world_size in [size for size in _POOLS if size > 2]:
        _POOLS.pop(world_size).close()


# What the checkout's top folder holds when the session starts: a test that writes into the working
# directory instead of its tmp_path (a library's default output folder: .cometml-runs/, mlruns/,
# wandb/) fails the session at its end, naming what it left.
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_AT_START = set(os.listdir(_CHECKOUT))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for pool in _POOLS.values():
        pool.close()
    left = sorted(set(os.listdir(_CHECKOUT)) - _AT_START - {".pytest_cache"})
    if left:
        print(
            f"\nThe tests left {left} in the checkout ({_CHECKOUT}): a test wrote into the working "
            "directory, not its tmp_path; find it and point that output at tmp_path.",
            file=sys.stderr,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _device_for_marker(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if _FORCED_CPU and ("cuda" in request.keywords or "multi_gpu" in request.keywords):
        monkeypatch.delenv("ACCELERATE_USE_CPU")


@pytest.fixture(autouse=True)
def _clean_state() -> Iterator[None]:
    """Every test starts with fresh accelerate state and must not leak env vars or a process group."""
    from accelerate.state import reset_state

    before = dict(os.environ)
    reset_state()
    yield
    reset_state()
    # The progress record an abnormal end writes points at the last Accelerator's checkpoints folder
    # (a module reference, for the exception and SIGTERM handlers); a later test must not write there.
    membership = sys.modules.get("accelerate.checkpointing.membership")
    if membership is not None:
        membership._active = None
    # The project folders this process took (a job owns them until it exits; a test is a job).
    owner = sys.modules.get("accelerate.storage.project_lock")
    if owner is not None:
        owner.release_projects()
    leaked = {k for k in os.environ if k not in before or os.environ[k] != before[k]}
    leaked |= {k for k in before if k not in os.environ}
    # pytest's own bookkeeping, and cache locations torch's compiler sets for itself on first use.
    leaked = {k for k in leaked if k != "PYTEST_CURRENT_TEST" and not k.startswith("TORCHINDUCTOR_")}
    for key in leaked:
        if key in before:
            os.environ[key] = before[key]
        else:
            os.environ.pop(key, None)
    group_leaked = torch.distributed.is_available() and torch.distributed.is_initialized()
    if group_leaked:
        torch.distributed.destroy_process_group()
    assert not leaked, f"test leaked environment variables: {sorted(leaked)}"
    assert not group_leaked, "test left a torch.distributed process group initialised in the test process"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freezes what exists once every test module is imported (see freeze_imported_objects)."""
    freeze_imported_objects()


def freeze_imported_objects() -> None:
    """Takes the objects alive now (torch's, the imported modules') out of the garbage collector's walks.

    With torch imported a full collection takes about a second on a busy core (torch's objects are
    slow to traverse; 100,000 plain lists take milliseconds), and the suite runs many: each
    out-of-memory retry of find_executable_batch_size, each free_memory / release_memory, and the
    interpreter's own generation-2 passes. Objects made later, by the tests, are collected as before.
    """
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    has_cuda = torch.cuda.is_available()
    gpus = torch.cuda.device_count() if has_cuda else 0
    for item in items:
        if "cuda" in item.keywords and not has_cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if "multi_gpu" in item.keywords and gpus < 2:
            item.add_marker(pytest.mark.skip(reason="needs two or more CUDA GPUs"))
