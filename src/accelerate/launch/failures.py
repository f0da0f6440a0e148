"""Which rank failed first, and the report the launcher prints about a failed multi-process run.

torch's elastic agent notices a failure only at its next poll, then stops the other ranks and hands
over every failed rank at once. That loses the order: a rank that died without a traceback
(``os._exit``, SIGKILL, the OOM killer) and the peer that then hit "Connection reset by peer" look
alike, and only the peer has an error file. So while the agent runs, :class:`ExitClock` notes the
moment each child process of the launcher ended (on SIGCHLD, without reaping it: the agent still
collects the status).

The first failure is the process that ended first, when it ended without a traceback. When it did
leave a traceback, the first failure is the rank that raised first (the times in the error files):
a rank that raises first can still end last, because its peers fail as soon as its sockets close
while it shuts down, and their own shutdown can be quicker. End times are only compared with end
times and raise times with raise times: the launcher sees an end a little late, so an end and a
peer's traceback written a moment after it could otherwise come out in the wrong order.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from types import FrameType, SimpleNamespace
from typing import Any, TextIO

from accelerate.launch.worker_stderr import fatal_lines

_NO_TRACEBACK = "no Python traceback (os._exit, a crash, or a signal ended it)"


class ExitClock:
    """Wall-clock end times of this process's children, keyed by pid (see the module docstring)."""

    def __init__(self) -> None:
        self.ended: dict[int, float] = {}

    def _on_child_exit(self, signum: int, frame: FrameType | None) -> None:
        # A signal handler runs between any two bytecodes of the main thread, possibly in the middle
        # of an import or of this very handler (several workers end at once). It must therefore not
        # import, look up a codec (a text-mode open() does: a re-entered lookup of a half-imported
        # encodings module fails with "LookupError: unknown encoding") or raise: an exception here
        # would surface in torch's agent as a failed launch after a successful run.
        try:
            now = time.time()
            for pid in _child_pids():
                if pid in self.ended:
                    continue
                try:
                    # WNOWAIT: look without reaping, so the agent's own Popen.poll still gets the status.
                    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:  # already reaped by the agent
                    continue
                if info is not None:
                    self.ended[pid] = now
        except Exception:  # noqa: BLE001 - the clock only refines a failure report; never break a run
            return

    @contextlib.contextmanager
    def running(self) -> Iterator[ExitClock]:
        """Listens for SIGCHLD during the block (main thread on POSIX only; elsewhere it records nothing)."""
        usable = (
            hasattr(signal, "SIGCHLD")
            and hasattr(os, "waitid")
            and threading.current_thread() is threading.main_thread()
        )
        if not usable:
            yield self
            return
        previous = signal.signal(signal.SIGCHLD, self._on_child_exit)
        # Restart system calls it interrupts (SA_RESTART): a worker's exit must not make a blocking
        # call in another thread (torch's store, log tailing) fail with EINTR. The agent's sleep
        # between polls still wakes at once, so the handler runs promptly.
        signal.siginterrupt(signal.SIGCHLD, False)
        try:
            yield self
        finally:
            signal.signal(signal.SIGCHLD, previous)


def _child_pids() -> list[int]:
    """This process's children, zombies included (Linux lists them per thread in /proc).

    Called from a signal handler: bytes-only reads through os.open, no glob, no text decoding.
    """
    pids: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        tasks = []
    for task in tasks:
        try:
            fd = os.open(f"/proc/self/task/{task}/children", os.O_RDONLY)
        except OSError:
            continue
        try:
            data = b""
            while chunk := os.read(fd, 65536):
                data += chunk
        except OSError:
            continue
        finally:
            os.close(fd)
        pids += [int(pid) for pid in data.split()]
    if pids or not hasattr(os, "waitid"):
        return pids
    # No /proc (macOS) or no children files: the kernel still names one ended child, which is
    # enough to tell which process ended first.
    try:
        info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return []
    return [info.si_pid] if info is not None else []


def describe_code(code: int) -> str:
    """``exit code N`` or ``signal NAME`` for a Popen-style return code (negative: killed by a signal)."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def exit_code(code: int) -> int:
    """The status a shell would report: N, or 128 + N for a process killed by signal N."""
    return 128 - code if code < 0 else code


def report_failures(
    failures: Mapping[int, Any],
    err: TextIO,
    ended_at: Mapping[int, float] | None = None,
    stderr_tails: Mapping[int, str] | None = None,
) -> int:
    """Prints the first rank that failed with its traceback or exit status, then the others briefly.

    Args:
        failures: global rank -> torch's ProcessFailure (exitcode, pid, error_file_data, ...).
        err: where to print.
        ended_at: pid -> wall-clock time the process ended (from :class:`ExitClock`), when known.
        stderr_tails: global rank -> the end of its stderr (:mod:`accelerate.launch.worker_stderr`):
            the fatal lines in it (gloo's abort on a collective mismatch, C++'s ``terminate called``)
            are printed with the rank that wrote them, since such a crash leaves no traceback.

    Returns:
        The exit code the launcher should exit with: the first failure's (1, or 128 + signal).
    """
    everything = {**_sibling_failures(failures), **failures}
    if not everything:
        return 1
    ends = ended_at or {}
    first_rank = _first_failure(everything, ends)
    first = everything[first_rank]
    rest = sorted(
        (r for r in everything if r != first_rank), key=lambda r: _order_key(r, everything[r], ends)
    )
    ordered = [(first_rank, first), *((r, everything[r]) for r in rest)]
    lines = ["", "=" * 78, _title(first_rank, first, len(ordered) > 1)]
    stack = _traceback_of(first)
    if stack:
        lines += ["-" * 78, stack.rstrip()]
    else:
        lines.append(f"  {_NO_TRACEBACK}")
        if first.exitcode is not None and int(first.exitcode) == -signal.SIGKILL:
            lines.append(
                "  SIGKILL: often the kernel's out-of-memory killer (see `dmesg`), or a job manager."
            )
    for rank, words in fatal_lines(stderr_tails or {}, [rank for rank, _ in ordered]).items():
        lines.append(f"  rank {rank} wrote on stderr before it ended:")
        lines += [f"    {line}" for line in words]
    lines.append("=" * 78)
    for rank, failure in ordered[1:]:
        lines.append(_later_line(rank, failure, first_rank))
    print("\n".join(lines), file=err)
    return _status_of_first(first)


def _status_of_first(failure: Any) -> int:
    """The launcher's exit status: the first failure's own, never the SIGTERM the agent sent it.

    A rank that raised exits with 1 through the bootstrap; when the agent's SIGTERM caught it still
    shutting down (its peers ended sooner), 1 is still the status it failed with.
    """
    if failure.exitcode is None:
        return _own_exit_code(failure)
    code = int(failure.exitcode)
    if code == -signal.SIGTERM and _traceback_of(failure) is not None:
        return _own_exit_code(failure)
    return exit_code(code) or 1


def _ended(failure: Any, ended_at: Mapping[int, float]) -> float:
    pid = getattr(failure, "pid", None)
    return ended_at.get(pid, float("inf")) if isinstance(pid, int) else float("inf")


def _first_failure(failures: Mapping[int, Any], ended_at: Mapping[int, float]) -> int:
    """The rank that failed first (the rule is in the module docstring)."""
    by_end = min(failures, key=lambda r: (_ended(failures[r], ended_at), r))
    if _ended(failures[by_end], ended_at) < float("inf") and _traceback_of(failures[by_end]) is None:
        return by_end
    by_raise = min(failures, key=lambda r: (_failure_time(failures[r]), r))
    if _failure_time(failures[by_raise]) < float("inf"):
        return by_raise
    return by_end


def _order_key(rank: int, failure: Any, ended_at: Mapping[int, float]) -> tuple[float, float, int]:
    """The order of the ranks after the first: by end, then by traceback time."""
    return (_ended(failure, ended_at), _failure_time(failure), rank)


def _title(rank: int, failure: Any, several: bool) -> str:
    suffix = " (the first to fail)" if several else ""
    if failure.exitcode is None:
        return f"accelerate launch: rank {rank} raised an exception{suffix} (its exit status was not seen)"
    code = int(failure.exitcode)
    if code == -signal.SIGTERM and _traceback_of(failure) is not None:
        own = _own_exit_code(failure)
        how = "it raised" if own == 1 else "it exited"
        return (
            f"accelerate launch: rank {rank} (pid {failure.pid}) failed with exit code {own}{suffix}: {how}, and "
            "the launcher stopped it while it shut down"
        )
    return f"accelerate launch: rank {rank} (pid {failure.pid}) failed with {describe_code(code)}{suffix}"


def _later_line(rank: int, failure: Any, first_rank: int) -> str:
    """One line for a rank that failed after the first: its status and its exception's last line."""
    if failure.exitcode is None:
        status = "raised an exception"
    else:
        code = int(failure.exitcode)
        status = f"ended with {describe_code(code)}" + (" (stopped by the launcher)" if code == -15 else "")
    line = f"accelerate launch: rank {rank} {status} after rank {first_rank} failed"
    stack = _traceback_of(failure)
    if stack:
        line += f"; its last error: {stack.strip().splitlines()[-1]}"
    return line


def _sibling_failures(failures: Mapping[int, Any]) -> dict[int, Any]:
    """Error files of ranks the agent stopped before it saw them exit.

    When two ranks fail close together, the agent may report the one it noticed first and terminate
    the other, whose traceback is then only in its error file. Each local rank has its own folder
    ``.../attempt_N/<local_rank>/error.json`` beside the reported one.
    """
    found: dict[int, Any] = {}
    for rank, failure in failures.items():
        error_file = getattr(failure, "error_file", "") or ""
        local_rank = getattr(failure, "local_rank", None)
        if not error_file.endswith("error.json") or local_rank is None or not os.path.isfile(error_file):
            continue
        attempt_dir = os.path.dirname(os.path.dirname(error_file))
        offset = rank - int(local_rank)  # global rank of this machine's local rank 0
        for entry in os.listdir(attempt_dir):
            candidate = os.path.join(attempt_dir, entry, "error.json")
            if not entry.isdigit() or not os.path.isfile(candidate) or (offset + int(entry)) in failures:
                continue
            try:
                data = load_error_file(candidate)
            except (OSError, ValueError):
                continue
            found[offset + int(entry)] = SimpleNamespace(exitcode=None, pid=None, error_file_data=data)
        break
    return found


def _failure_time(failure: Any) -> float:
    data = getattr(failure, "error_file_data", None) or {}
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict) and "time" in message.get("extraInfo", {}):
        return float(message["extraInfo"]["time"])
    # No error file (killed by a signal, or exited without raising): after every recorded traceback.
    return float("inf")


def _own_exit_code(failure: Any) -> int:
    """The status the bootstrap recorded for this rank (sys.exit(N): N; an exception: 1)."""
    data = getattr(failure, "error_file_data", None) or {}
    message = data.get("message") if isinstance(data, dict) else None
    extra = message.get("extraInfo", {}) if isinstance(message, dict) else {}
    code = extra.get("exit_code", 1) if isinstance(extra, dict) else 1
    return code if isinstance(code, int) else 1


def _traceback_of(failure: Any) -> str | None:
    """The traceback the bootstrap (or torch's @record) wrote for this rank, if any."""
    data = getattr(failure, "error_file_data", None) or {}
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict):
        stack = message.get("extraInfo", {}).get("py_callstack")
        return str(stack) if stack else str(message.get("message", "")) or None
    if isinstance(message, str) and message and message != "<NONE>":
        return message
    return None


def load_error_file(path: str) -> dict[str, Any]:
    """Reads a bootstrap error file (tests and tools)."""
    with open(path, encoding="utf-8") as file:
        data: dict[str, Any] = json.load(file)
    return data


def restart_report(
    failures: Mapping[int, Any] | None,
    ended_at: Mapping[int, float],
    *,
    restart: int | None,
    max_restarts: int,
) -> str:
    """What the launcher prints when the agent restarts the processes (``--max_restarts``).

    The rank that failed first with why (the last frame and line of its traceback, or its exit
    code or signal), one line per other failed rank, and which restart this is.
    """
    lines = ["", "=" * 78]
    everything = {**_sibling_failures(failures), **failures} if failures else {}
    if everything:
        first_rank = _first_failure(everything, ended_at)
        first = everything[first_rank]
        lines.append(_title(first_rank, first, len(everything) > 1))
        lines += [f"  {line}" for line in _why(first)]
        rest = sorted(
            (r for r in everything if r != first_rank), key=lambda r: _order_key(r, everything[r], ended_at)
        )
        lines += [_later_line(rank, everything[rank], first_rank) for rank in rest]
    else:
        lines.append("accelerate launch: the worker group became unhealthy or its membership changed")
    if restart is None:
        lines.append("accelerate launch: restarting every process")
    else:
        lines.append(
            f"accelerate launch: restarting every process (restart attempt {restart} of {max_restarts}, "
            f"--max_restarts {max_restarts})"
        )
    lines.append("=" * 78)
    return "\n".join(lines)


def _why(failure: Any) -> list[str]:
    """Where the exception was raised and its message, or that there was no traceback."""
    stack = _traceback_of(failure)
    if not stack:
        why = [_NO_TRACEBACK]
        if failure.exitcode is not None and int(failure.exitcode) == -signal.SIGKILL:
            why.append("SIGKILL: often the kernel's out-of-memory killer (see `dmesg`), or a job manager.")
        return why
    text = stack.strip().splitlines()
    frames = [line.strip() for line in text if line.lstrip().startswith('File "')]
    return ([frames[-1]] if frames else []) + [text[-1].strip()]
