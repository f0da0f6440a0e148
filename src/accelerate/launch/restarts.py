"""Saying on the console that torch's elastic agent restarts the processes (``--max_restarts N``).

The agent restarts the whole worker group after a failure on its own, and tells only its logger
("Worker group FAILED. 1/1 attempts left; will restart worker group"), which says neither which
rank failed nor why. While a launch runs, :func:`reporting_restarts` has torch's launcher build an
agent that reports, just before each restart, the rank that failed first, why (its exception, or
its exit code or signal) and which restart this is — the same facts the final failure report gives
(:mod:`accelerate.launch.failures`), so a log shows every failure the run survived.

The hook is a subclass of torch's ``LocalElasticAgent`` put in the place ``launch_agent`` looks it
up for the duration of the launch; it overrides three private methods (the third records each
group's membership after a rendezvous), so a torch that renamed them simply runs unreported (the
restarts themselves are torch's and work either way). What the overrides read is public: the
failures torch's monitor returns, the worker group's rank, size and store.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

from accelerate.launch.elastic import MembershipLog, exchange_node_names, this_node
from accelerate.launch.failures import restart_report

_HOOKED = ("_monitor_workers", "_restart_workers", "_rendezvous")


@contextlib.contextmanager
def reporting_restarts(
    err: TextIO, ended_at: Mapping[int, float] | None = None, membership: MembershipLog | None = None
) -> Iterator[None]:
    """During the block, elastic launches print a report to ``err`` before each restart.

    ``ended_at`` is read at each restart, not copied: the clock fills it while the launch runs.

    Args:
        err: where to print.
        ended_at: pid -> the time each worker ended (the launcher's ExitClock), to tell which rank
            failed first.
        membership: where the groups the rendezvous forms are recorded; each change of members is
            printed (one line per node that left or joined) before the processes start again.
    """
    import torch.distributed.launcher.api as launcher_api

    base = getattr(launcher_api, "LocalElasticAgent", None)
    if base is None or not all(hasattr(base, name) for name in _HOOKED):
        yield
        return
    # The launcher imports the agent class without re-exporting it, so mypy sees no such attribute;
    # replacing the module's binding is the point (launch_agent looks the class up there).
    agent = _reporting_agent(base, err, {} if ended_at is None else ended_at, membership or MembershipLog())
    launcher_api.LocalElasticAgent = agent  # type: ignore[attr-defined]
    try:
        yield
    finally:
        launcher_api.LocalElasticAgent = base  # type: ignore[attr-defined]


def _reporting_agent(
    base: type[Any], err: TextIO, ended_at: Mapping[int, float], membership: MembershipLog
) -> type[Any]:
    name = this_node()

    # The base is whichever agent class torch's launcher holds, known only at run time.
    class ReportingAgent(base):  # type: ignore[misc]
        """torch's agent, remembering the latest failures and reporting them when it restarts."""

        _accelerate_failures: Mapping[int, Any] | None = None

        def _monitor_workers(self, worker_group: Any) -> Any:
            result = super()._monitor_workers(worker_group)
            failures = getattr(result, "failures", None)
            if failures:
                self._accelerate_failures = dict(failures)
            return result

        def _restart_workers(self, worker_group: Any) -> None:
            failures, self._accelerate_failures = self._accelerate_failures, None
            spec = worker_group.spec
            # The agent counts a failure's restart down before it calls this; a membership change
            # (no failures) restarts without counting, so it gets no number.
            remaining = getattr(self, "_remaining_restarts", None)
            done = spec.max_restarts - remaining if failures and isinstance(remaining, int) else None
            try:
                print(
                    restart_report(failures, ended_at, restart=done, max_restarts=spec.max_restarts), file=err
                )
                err.flush()
            except Exception:  # noqa: BLE001 - a report that cannot be printed must not stop the restart
                pass
            super()._restart_workers(worker_group)

        def _rendezvous(self, worker_group: Any) -> None:
            super()._rendezvous(worker_group)
            try:
                spec = worker_group.spec
                world = int(worker_group.group_world_size) * int(spec.local_world_size)
                # The names travel through the round's store (public API); the ranks come from torch.
                nodes = exchange_node_names(
                    worker_group.store, int(worker_group.group_rank), int(worker_group.group_world_size), name
                )
                for line in membership.formed(nodes, world):
                    print(f"accelerate launch: membership: {line}", file=err)
                err.flush()
            except Exception:  # noqa: BLE001 - a report that cannot be made must not stop the group
                pass

    return ReportingAgent
