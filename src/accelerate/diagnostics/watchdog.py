"""Hang diagnosis: every rank says where it is when the ranks stop meeting in collectives.

Two pieces, one per process:

- :data:`SLOT`, the collective slot. Every accelerate collective enters it (``with
  SLOT.enter("gather", tensor):``), which is a few attribute writes: the operation, the data (its
  shapes are only read if a report is written), the time it started and the thread. Optimizer
  steps count into ``SLOT.step``. Nothing is communicated and nothing is formatted on this path.
- :class:`Watchdog`, a daemon thread started with the process group. Every ``poll_s`` it looks at
  the slot: a collective older than ``deadline_s`` (three quarters of the process group's timeout,
  so the report comes before torch's own timeout error) means this rank waits for a peer that is not
  coming. It then writes this rank's report (:mod:`accelerate.diagnostics.rank_report`), raises a flag in
  the process group's key-value store, and gives its peers ``grace_s`` to answer. Every other rank's
  watchdog polls that flag and, seeing it, reports too, wherever it is: in user code (the rank that
  is missing), or in another collective. Then every rank ends with :data:`HANG_EXIT_CODE`, and the
  launcher prints one summary from the reports.

The store (TCP, hosted by the launcher's agent) is used instead of a collective because a
collective would itself hang on the missing rank. The main thread may be blocked inside a C++
collective: it has released the GIL there, so this thread can read its Python stack and end the
process with ``os._exit`` (a Python exception could not reach it).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from accelerate.diagnostics.rank_report import HANG_EXIT_CODE, build_report, format_report, write_report

__all__ = [
    "HANG_EXIT_CODE",
    "REPORTED",
    "SLOT",
    "CollectiveSlot",
    "Watchdog",
    "start_watchdog",
    "stop_watchdog",
]

_KEY = "accelerate/watchdog"
# Set once this process has reported a hang: the process is about to end, and an error its main
# thread raises meanwhile (a peer that already ended closed the connection) is only a consequence.
REPORTED = threading.Event()
# torch's flight recorder keeps its last collectives when one of these is set (the launcher sets them).
_FLIGHT_RECORDER_ENV = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")


class CollectiveSlot:
    """Which accelerate collective this process is in (see the module docstring).

    Entering a collective inside another (``gather_for_metrics`` gathers) keeps the outer one,
    which is reported again once the inner one is left.
    """

    __slots__ = ("operation", "data", "since", "thread", "count", "step", "_outer")

    def __init__(self) -> None:
        self.operation: str | None = None
        self.data: Any = None
        self.since = 0.0
        self.thread: int | None = None
        self.count = 0
        self.step = 0
        self._outer: list[tuple[str, Any, float, int | None]] = []

    def enter(self, operation: str, data: Any = None) -> CollectiveSlot:
        if self.operation is not None:
            self._outer.append((self.operation, self.data, self.since, self.thread))
        self.operation = operation
        self.data = data
        self.since = time.monotonic()
        self.thread = threading.get_ident()
        self.count += 1
        return self

    def __enter__(self) -> CollectiveSlot:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._outer:
            self.operation, self.data, self.since, self.thread = self._outer.pop()
        else:
            self.operation = None
            self.data = None

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


SLOT = CollectiveSlot()


def _default_store() -> Any:
    import torch.distributed as dist

    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return dist.distributed_c10d._get_default_store()
    except (RuntimeError, ValueError, AttributeError):
        return None


def flight_recorder_lines(last: int = 5) -> list[str]:
    """torch's own record of this process's last collectives (gloo and NCCL), one line each.

    Empty unless the flight recorder is on (``TORCH_FR_BUFFER_SIZE``, which ``accelerate launch``
    sets). Private torch API, read best effort: it only adds detail to a report.
    """
    if not any(os.environ.get(name, "0") not in ("", "0") for name in _FLIGHT_RECORDER_ENV):
        return []
    try:
        import torch._C._distributed_c10d as c10d
    except Exception:  # noqa: BLE001 - a torch without distributed: no recorder
        return []
    # Two recorders: the generic one (gloo) and ProcessGroupNCCL's own, where NCCL collectives go;
    # the NCCL one exists only in CUDA builds of torch.
    entries: list[dict[str, Any]] = []
    for name in ("_dump_fr_trace_json", "_dump_nccl_trace_json"):
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        try:
            found = json.loads(dump(True, False)).get("entries", [])
        except Exception:  # noqa: BLE001 - changed in this torch: the report goes on without it
            continue
        entries += [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []
    entries.sort(key=lambda e: e.get("time_created_ns") or 0)
    lines = []
    for entry in entries[-last:]:
        state = "completed" if entry.get("retired") else entry.get("state", "?")
        lines.append(
            f"#{entry.get('collective_seq_id')} {entry.get('profiling_name')} "
            f"in {entry.get('input_sizes')} out {entry.get('output_sizes')}: {state}"
        )
    return lines


class Watchdog:
    """The per-process thread that turns a hang into a report (see the module docstring).

    Args:
        rank, world_size: this process's place in the group.
        timeout: the process group's timeout.
        report_dir: where to write ``rank_<N>.json`` (``ACCELERATE_HANG_REPORT_DIR``); None: stderr only.
        poll_s: how often the slot and the store are looked at.
        store: the key-value store to flag the hang in; default: the process group's.
        exit: how the process ends after reporting (tests pass their own).
    """

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        timeout: timedelta,
        report_dir: str | None = None,
        poll_s: float = 0.5,
        store: Callable[[], Any] = _default_store,
        exit: Callable[[int], Any] = os._exit,  # noqa: A002 - reads as what it is
    ) -> None:
        seconds = timeout.total_seconds()
        if seconds <= 0:
            raise ValueError(f"Watchdog(timeout={timeout}) must be a positive duration")
        self.rank = rank
        self.world_size = world_size
        self.timeout_s = seconds
        self.deadline_s = 0.75 * seconds
        # Time for the peers to notice the flag and report, still inside the group's timeout.
        self.grace_s = min(10.0, max(3.0, 0.2 * seconds))
        self.report_dir = report_dir
        self.poll_s = min(poll_s, self.deadline_s / 4)
        self._store = store
        self._exit = exit
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="accelerate-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                reason = self._check()
            except Exception as exc:  # noqa: BLE001 - the watchdog must never be what breaks a run
                print(f"accelerate: hang watchdog stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
                return
            if reason is not None:
                self._fire(reason)
                return

    def _check(self) -> str | None:
        operation, since = SLOT.operation, SLOT.since
        if operation is not None and time.monotonic() - since > self.deadline_s:
            return "timeout"
        store = self._store()
        if store is not None and self.world_size > 1:
            try:
                if store.check([f"{_KEY}/trigger"]):
                    return "peer"
            except Exception:  # noqa: BLE001 - the store went away (job ending): nothing to poll
                self._store = lambda: None
        return None

    def _fire(self, reason: str) -> None:
        self.fired = True
        operation, data, since = SLOT.operation, SLOT.data, SLOT.since
        report = build_report(
            rank=self.rank,
            reason=reason,
            operation=operation,
            data=data,
            waited_s=time.monotonic() - since if operation is not None else None,
            collective=SLOT.count,
            step=SLOT.step,
            thread_id=SLOT.thread if operation is not None else None,
            timeout_s=self.timeout_s,
            flight_recorder=flight_recorder_lines(),
            skip_thread=threading.get_ident(),
        )
        written = write_report(report, self.report_dir)
        # With a report file the launcher prints everything once; without one, stderr is the report.
        # One write, so that the ranks' lines do not interleave on a shared terminal.
        sys.stderr.write(format_report(report, brief=written is not None) + "\n")
        sys.stderr.flush()
        REPORTED.set()
        self._tell_peers_and_wait(reason)
        self._exit(HANG_EXIT_CODE)

    def _tell_peers_and_wait(self, reason: str) -> None:
        """Flags the hang (this rank found it) and waits, at most ``grace_s``, for every rank's report."""
        store = self._store() if self.world_size > 1 else None
        if store is None:
            return
        deadline = time.monotonic() + self.grace_s
        try:
            if reason == "timeout":
                store.set(f"{_KEY}/trigger", str(self.rank))
            store.set(f"{_KEY}/done/{self.rank}", "1")
            keys = [f"{_KEY}/done/{r}" for r in range(self.world_size)]
            while not store.check(keys) and time.monotonic() < deadline:
                time.sleep(0.1)
        except Exception:  # noqa: BLE001 - the store is gone: peers are ending anyway
            return


_CURRENT: Watchdog | None = None
_LOCK = threading.Lock()


def start_watchdog(*, rank: int, world_size: int, timeout: timedelta, report_dir: str | None) -> Watchdog:
    """Starts this process's watchdog (replacing a running one); ``PartialState`` calls it."""
    global _CURRENT
    watchdog = Watchdog(rank=rank, world_size=world_size, timeout=timeout, report_dir=report_dir)
    with _LOCK:
        previous, _CURRENT = _CURRENT, watchdog
    if previous is not None:
        previous.stop()
    watchdog.start()
    return watchdog


def stop_watchdog() -> None:
    """Stops this process's watchdog, if any (state reset, process group teardown, exit)."""
    global _CURRENT
    with _LOCK:
        previous, _CURRENT = _CURRENT, None
    if previous is not None:
        previous.stop()
