"""What one rank says about itself when the job hangs: where it is, and in which collective.

The watchdog (:mod:`accelerate.diagnostics.watchdog`) builds this report from a thread of its own while
the main thread may be blocked inside a C++ collective, so everything here reads state without
touching the communicator: ``sys._current_frames()`` for the stacks (a thread blocked in gloo has
released the GIL, so its Python frames can be read), the collective slot for the operation.

The report is plain JSON, written to ``<ACCELERATE_HANG_REPORT_DIR>/rank_<N>.json``, which the
launcher (:mod:`accelerate.launch.hang_report`) reads to print one summary for the whole job.
This module imports neither torch nor the rest of accelerate, so the launcher can use it too.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from types import FrameType
from typing import Any

# The exit status of a process the watchdog ends: 124, what `timeout(1)` uses for "ran out of time".
HANG_EXIT_CODE = 124
REPORT_PREFIX = "rank_"
REPORT_SUFFIX = ".json"


def report_path(directory: str, rank: int) -> str:
    return os.path.join(directory, f"{REPORT_PREFIX}{rank}{REPORT_SUFFIX}")


def describe_shapes(data: Any, limit: int = 8) -> list[str]:
    """``["(4, 3):float32", ...]`` for the tensors in a nested structure (the first ``limit``)."""
    out: list[str] = []

    def walk(value: Any) -> None:
        if len(out) >= limit:
            return
        if isinstance(value, Mapping):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif hasattr(value, "shape") and hasattr(value, "dtype"):
            out.append(f"{tuple(value.shape)}:{str(value.dtype).replace('torch.', '')}")

    try:
        walk(data)
    except Exception:  # noqa: BLE001 - a structure changing under us must not stop the report
        pass
    return out


def _library_dirs() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Folders whose frames are not "the user's code": (accelerate's, torch's and the standard library's)."""
    # Imported here, when a report is built: every process loads this module (through the hang
    # watchdog, with the collectives), and sysconfig is the one module it would add after torch.
    import sysconfig

    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # .../accelerate/
    others = set()
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            others.add(os.path.abspath(path) + os.sep)
    torch = sys.modules.get("torch")
    torch_file = getattr(torch, "__file__", None)
    if torch_file:
        others.add(os.path.dirname(os.path.abspath(torch_file)) + os.sep)
    return (ours,), tuple(others)


def _in(filename: str, dirs: tuple[str, ...]) -> bool:
    # <frozen runpy>, <string>: never the user's file.
    return filename.startswith("<") or os.path.abspath(filename).startswith(dirs)


def user_location(frame: FrameType | None) -> dict[str, Any] | None:
    """The innermost frame of ``frame``'s stack that belongs to the user's code (file, line, function).

    A rank in ``accelerator.gather`` is "at" the line of the script that called it, not inside
    accelerate or torch; a rank in ``time.sleep`` inside ``stuck_here()`` is at ``stuck_here``.
    Without any user frame (the launcher's own end-of-script barrier), the innermost frame of
    accelerate's, else the innermost frame.
    """
    ours, others = _library_dirs()
    stack: list[FrameType] = []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    if not stack:
        return None
    chosen = next((f for f in stack if not _in(f.f_code.co_filename, ours + others)), None)
    chosen = chosen or next((f for f in stack if not _in(f.f_code.co_filename, others)), stack[0])
    return {"file": chosen.f_code.co_filename, "line": chosen.f_lineno, "function": chosen.f_code.co_name}


def _format_stack(frame: FrameType) -> str:
    """The stack, outermost first, without the launcher's bootstrap and runpy frames (noise to the user)."""
    entries = traceback.extract_stack(frame)
    start = 0
    for i, entry in enumerate(entries):
        if entry.filename.startswith("<frozen") or entry.filename.endswith(_BOOTSTRAP_TAIL):
            start = i + 1
    return "".join(traceback.format_list(entries[start:] or entries))


_BOOTSTRAP_TAIL = os.path.join("accelerate", "launch", "bootstrap.py")


def build_report(
    *,
    rank: int,
    reason: str,
    operation: str | None,
    data: Any,
    waited_s: float | None,
    collective: int,
    step: int,
    thread_id: int | None,
    timeout_s: float,
    flight_recorder: list[str] | None = None,
    skip_thread: int | None = None,
) -> dict[str, Any]:
    """This rank's report (see the module docstring).

    Args:
        rank: this process's global rank.
        reason: ``"timeout"`` (this rank waited past the deadline) or ``"peer"`` (another rank did).
        operation: the accelerate collective this rank is in, or None.
        data: what was passed to it (only its shapes are reported).
        waited_s: seconds spent in ``operation`` so far.
        collective: how many accelerate collectives this rank has entered (the current one included).
        step: optimizer steps taken through accelerate.
        thread_id: the thread that is in ``operation`` (default: the main thread).
        timeout_s: the process group's timeout.
        flight_recorder: torch's own record of the last collectives, one line each, when available.
        skip_thread: a thread not to report (the watchdog itself).
    """
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    main_id = threading.main_thread().ident
    focus = thread_id if thread_id in frames else main_id
    focus_frame = frames.get(focus) if focus is not None else None
    threads = {
        f"{names.get(ident, 'thread')} ({ident})": _format_stack(frame)
        for ident, frame in frames.items()
        if ident not in (focus, skip_thread)
    }
    return {
        "rank": rank,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "time": time.time(),
        # torchrun restarts count up: the launcher keeps only the latest attempt's reports.
        "attempt": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0),
        "reason": reason,
        "operation": operation,
        "shapes": describe_shapes(data) if operation is not None else [],
        "waited_s": waited_s,
        "collective": collective,
        "step": step,
        "timeout_s": timeout_s,
        "where": user_location(focus_frame),
        "thread": names.get(focus, "thread"),
        "stack": _format_stack(focus_frame) if focus_frame is not None else "",
        "other_threads": threads,
        "flight_recorder": flight_recorder or [],
    }


def write_report(report: Mapping[str, Any], directory: str | None) -> str | None:
    """Writes ``report`` atomically (temp file, then rename) under ``directory``; returns the path.

    Without a directory (a run not started by ``accelerate launch``) nothing is written; the
    watchdog prints the report on stderr either way.
    """
    if not directory:
        return None
    path = report_path(directory, int(report["rank"]))
    temp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temp, "w", encoding="utf-8") as file:
            json.dump(report, file)
        os.replace(temp, path)
    except OSError as err:
        print(f"accelerate: could not write the hang report {path}: {err}", file=sys.stderr, flush=True)
        return None
    return path


def format_location(where: Mapping[str, Any] | None) -> str:
    if not where:
        return "an unknown place"
    return f"{where['file']}:{where['line']} in {where['function']}()"


def format_rank_line(report: Mapping[str, Any]) -> str:
    """One line about a rank: the collective it waits in (with shapes), or where it is instead."""
    rank, where = report["rank"], format_location(report.get("where"))
    step = f"step {report.get('step', 0)}"
    operation = report.get("operation")
    if operation:
        shapes = ", ".join(report.get("shapes") or []) or "no tensors"
        waited = report.get("waited_s")
        for_how_long = f" for {waited:.0f} s" if isinstance(waited, (int, float)) else ""
        return (
            f"rank {rank} waits in `{operation}` (accelerate collective #{report.get('collective')}, {step}) "
            f"with [{shapes}]{for_how_long}, called at {where}"
        )
    return (
        f"rank {rank} is in no accelerate collective (it finished #{report.get('collective')}, {step}); "
        f"it is at {where}"
    )


def format_report(report: Mapping[str, Any], *, brief: bool = False) -> str:
    """The report as text, for the rank's own stderr (``brief``: one line, the launcher prints the rest)."""
    head = f"accelerate: hang watchdog: {format_rank_line(report)}"
    if brief:
        return head
    lines = [head, report.get("stack", "").rstrip()]
    for line in report.get("flight_recorder") or []:
        lines.append(f"  flight recorder: {line}")
    return "\n".join(line for line in lines if line)
