"""Real multi-process test execution on gloo, with process groups shared across tests.

Starting N Python processes that import torch and form a gloo group costs seconds, so a pool keeps
N workers alive for the whole session. ``pool.run(fn, *args)`` runs ``fn`` on every rank (``fn`` is
sent by module and qualified name, so it must be a top-level function of an importable module)
and returns each rank's result. Workers only set the variables a launcher sets (RANK, WORLD_SIZE,
MASTER_ADDR, ...): the code under test creates the process group, so its real initialisation is
what the tests exercise. Between calls every worker resets accelerate's per-process state and
restores its environment; the process group itself is kept for the next call.

A call that does not finish within its timeout, or a worker that dies, tears the pool down (the
next call starts a fresh one) and fails the test with what each rank said — never a hang.
"""

from __future__ import annotations

import gc
import importlib
import multiprocessing as mp
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

from accelerate.utils.ports import find_free_port


def free_port() -> int:
    """A free TCP port below Linux's ephemeral range, as the launcher picks its rendezvous port.

    A port the kernel just handed out with bind(0) is ephemeral: the next outgoing connection of
    any process (gloo opens many) may get it before the workers' store binds it.
    """
    return find_free_port()


def _worker(rank: int, world_size: int, port: int, conn: Connection) -> None:
    # The variables torchrun would set: the code under test (PartialState) creates the process
    # group from them on first use, exactly as in a launched script, and later calls reuse it.
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(world_size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
        }
    )
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    from accelerate.state import reset_state

    # As the test process does (tests/conftest.py, freeze_imported_objects): torch's objects out of
    # the collector's walks, else every gc.collect of a payload (each retry of
    # find_executable_batch_size, each free_memory) walks them for about a second on a busy core.
    gc.collect()
    gc.freeze()
    base_env = dict(os.environ)
    while True:
        message = conn.recv()
        if message is None:
            break
        module, qualname, args, kwargs, env, path, next_port = message
        for entry in reversed(path):
            if entry not in sys.path:
                sys.path.insert(0, entry)
        if not dist.is_initialized():
            # An earlier call destroyed the group: the next one meets on a port no earlier group's
            # store may still hold (the ranks tear groups down at slightly different times).
            base_env["MASTER_PORT"] = os.environ["MASTER_PORT"] = str(next_port)
        os.environ.update(env)
        try:
            target: Any = importlib.import_module(module)
            for part in qualname.split("."):
                target = getattr(target, part)
            conn.send(("ok", target(*args, **kwargs)))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the test
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        finally:
            # The process group survives (creating one costs a rendezvous); a test that destroyed
            # it gets a new one from the next PartialState().
            reset_state()
            _release_projects()
            os.environ.clear()
            os.environ.update(base_env)
            torch.set_num_threads(1)
    # Exit runs accelerate's own teardown (stop background work, destroy the group it created).


def _release_projects() -> None:
    """Each call is a job of its own: the project folders it took are free for the next (or the test)."""
    owner = sys.modules.get("accelerate.storage.project_lock")
    if owner is not None:
        owner.release_projects()


class DistributedFailure(AssertionError):
    """A function failed (or hung) on at least one rank; the message holds every rank's report."""


class WorkerPool:
    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self._procs: list[Any] = []
        self._conns: list[Connection] = []

    def _start(self) -> None:
        from tests.helpers.lanes import in_process_lane

        if in_process_lane():
            # A pool of its own there would run beside the process lane's pools (make test).
            raise RuntimeError(
                f"a test of make test's in-process lane started a {self.world_size}-process pool: remove its "
                "file from IN_PROCESS in tests/helpers/lanes.py so that it runs in the process lane"
            )
        ctx = mp.get_context("spawn")
        port = free_port()
        for rank in range(self.world_size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(rank, self.world_size, port, child), daemon=True)
            proc.start()
            self._procs.append(proc)
            self._conns.append(parent)

    def close(self) -> None:
        for conn in self._conns:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self._procs, self._conns = [], []

    def run(
        self,
        fn: Callable[..., Any],
        *args: Any,
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
        **kwargs: Any,
    ) -> list[Any]:
        """Runs ``fn(*args, **kwargs)`` on every rank and returns the results, rank order."""
        if not self._procs:
            self._start()
        next_port = free_port()  # used only if the workers have no group left to reuse
        message = (fn.__module__, fn.__qualname__, args, kwargs, dict(env or {}), list(sys.path), next_port)
        for conn in self._conns:
            conn.send(message)
        results: list[Any] = []
        errors: list[str] = []
        for rank, conn in enumerate(self._conns):
            if not conn.poll(timeout):
                errors.append(f"rank {rank}: no answer within {timeout:.0f}s (hung or deadlocked)")
                results.append(None)
                continue
            try:
                status, payload = conn.recv()
            except EOFError:
                errors.append(f"rank {rank}: worker died (exit code {self._procs[rank].exitcode})")
                results.append(None)
                continue
            if status == "ok":
                results.append(payload)
            else:
                errors.append(f"rank {rank}: {payload}")
                results.append(None)
        if errors:
            hung = any("no answer" in e or "died" in e for e in errors)
            if hung or len(errors) < self.world_size:
                # A rank that failed alone may leave the others inside a collective: start afresh.
                self.close()
            raise DistributedFailure(f"{fn.__qualname__} failed:\n" + "\n".join(errors))
        return results
