"""The launcher's side of hang diagnosis: where the ranks report, and the one summary it prints.

``accelerate launch`` gives its processes a fresh folder (``ACCELERATE_HANG_REPORT_DIR``). When the
ranks stop meeting in collectives, each rank's watchdog (:mod:`accelerate.diagnostics.watchdog`) writes
``rank_<N>.json`` there and the process ends with exit code 124. After the failure, the launcher
reads the folder and prints which ranks wait in which collective (with shapes and the line that
called it), which rank is missing and where it is (file:line and function), then each rank's stack.

The same folder receives the dumps of torch's own NCCL watchdog (``TORCH_NCCL_DUMP_ON_TIMEOUT``),
for hangs that NCCL's asynchronous collectives only reveal later, when the GPU stream is waited on;
its last entries per rank are listed too. Imports no torch.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from collections.abc import Mapping
from typing import Any, TextIO

from accelerate.diagnostics.rank_report import (
    HANG_EXIT_CODE,
    REPORT_PREFIX,
    REPORT_SUFFIX,
    format_location,
    format_rank_line,
)

HANG_REPORT_DIR_ENV = "ACCELERATE_HANG_REPORT_DIR"
NCCL_DUMP_PREFIX = "nccl_trace_rank_"
# torch's flight recorder: how many recent collectives each process keeps (gloo and NCCL).
FLIGHT_RECORDER_ENTRIES = "2000"
_RULE = "=" * 78
_THIN = "-" * 78


def hang_env(directory: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child variables for hang reports in ``directory``; a user's own TORCH_* settings win."""
    env = os.environ if environ is None else environ
    wanted = {
        HANG_REPORT_DIR_ENV: directory,
        # One variable for gloo and NCCL (torch warns that TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated).
        "TORCH_FR_BUFFER_SIZE": FLIGHT_RECORDER_ENTRIES,
        # NCCL's watchdog: on a timeout, dump the flight recorder where the launcher looks.
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": os.path.join(directory, NCCL_DUMP_PREFIX),
    }
    return {k: v for k, v in wanted.items() if k == HANG_REPORT_DIR_ENV or k not in env}


def read_reports(directory: str, attempt: int | None = None) -> dict[int, dict[str, Any]]:
    """rank -> report, of restart ``attempt`` (default: the latest that reported); an earlier attempt's
    reports may still lie in the folder after torchrun restarted the workers."""
    reports: dict[int, dict[str, Any]] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return reports
    for name in names:
        if not (name.startswith(REPORT_PREFIX) and name.endswith(REPORT_SUFFIX)):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as file:
                report = json.load(file)
            reports[int(report["rank"])] = report
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if reports and attempt is None:
        attempt = max(int(r.get("attempt", 0)) for r in reports.values())
    return {rank: r for rank, r in reports.items() if int(r.get("attempt", 0)) == attempt}


def failed_attempt(failures: Mapping[int, Any]) -> int | None:
    """The restart attempt the failures belong to, from torch's error-file path (``.../attempt_N/...``)."""
    for failure in failures.values():
        match = re.search(r"attempt_(\d+)", str(getattr(failure, "error_file", "") or ""))
        if match:
            return int(match.group(1))
    return None


def read_nccl_dumps(directory: str, last: int = 5) -> dict[int, list[str]]:
    """rank -> the last entries of torch's NCCL flight-recorder dump, one line each."""
    dumps: dict[int, list[str]] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return dumps
    for name in names:
        suffix = name[len(NCCL_DUMP_PREFIX) :]
        if not name.startswith(NCCL_DUMP_PREFIX) or not suffix.isdigit():
            continue
        entries = _load_dump(os.path.join(directory, name))
        if entries is not None:
            dumps[int(suffix)] = [_entry_line(e) for e in entries[-last:]]
    return dumps


def _load_dump(path: str) -> list[dict[str, Any]] | None:
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except OSError:
        return None
    data: Any = None
    try:
        data = json.loads(raw)
    except ValueError:
        try:
            # torch writes the dump with pickle by default; the file is one this launcher asked for.
            data = pickle.loads(raw)  # noqa: S301
        except Exception:  # noqa: BLE001 - a truncated or foreign file: skip it
            return None
    entries = data.get("entries") if isinstance(data, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else None


def _entry_line(entry: Mapping[str, Any]) -> str:
    state = "completed" if entry.get("retired") and entry.get("state") != "started" else entry.get("state")
    return (
        f"#{entry.get('collective_seq_id')} {entry.get('profiling_name')} in {entry.get('input_sizes')} "
        f"out {entry.get('output_sizes')}: {state}"
    )


def summarize(
    reports: Mapping[int, Mapping[str, Any]], ranks: list[int], nccl: Mapping[int, list[str]]
) -> str:
    """The launcher's summary (see the module docstring). ``ranks``: every rank known to have run."""
    waiting = [r for r in sorted(reports) if reports[r].get("operation")]
    elsewhere = [r for r in sorted(reports) if not reports[r].get("operation")]
    silent = [r for r in sorted(set(ranks) | set(nccl)) if r not in reports]
    found = [reports[r] for r in waiting if reports[r].get("reason") == "timeout"]
    timeout = next((rep.get("timeout_s") for rep in reports.values() if rep.get("timeout_s")), None)
    title = "accelerate launch: hang detected: the processes stopped meeting in collectives"
    if timeout:
        title += f" (process-group timeout {timeout:g} s"
        title += f"; rank {found[0]['rank']} gave up after {found[0]['waited_s']:.0f} s)" if found else ")"
    lines = ["", _RULE, title]
    for r in waiting:
        lines.append(f"  waiting: {format_rank_line(reports[r])}")
    for r in elsewhere:
        lines.append(f"  missing: {format_rank_line(reports[r])}")
    for r in silent:
        lines.append(
            f"  missing: rank {r} sent no report (it ended first, runs on another machine, or holds the GIL)"
        )
    distinct = {(reports[r].get("operation"), reports[r].get("collective")) for r in waiting}
    if len(distinct) > 1:
        listing = ", ".join(
            f"rank {r} in `{reports[r]['operation']}` (#{reports[r].get('collective')})" for r in waiting
        )
        lines.append(f"  the ranks are in different collectives: {listing}")
    for r in [*elsewhere, *waiting]:
        lines += [_THIN, *_rank_section(reports[r])]
    for r in sorted(nccl):
        lines += [_THIN, f"rank {r}: torch's NCCL flight recorder (last collectives):"]
        lines += [f"  {line}" for line in nccl[r]]
    lines += [_RULE, _HINT]
    return "\n".join(lines)


_HINT = (
    "Every rank must call the same collectives (gather, reduce, wait_for_everyone, ...) in the same order; "
    "one inside `if accelerator.is_main_process:` leaves the others waiting. A rank that is only slow "
    "(saving or evaluating alone) needs a longer timeout: "
    "Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(minutes=30))])."
)


def _rank_section(report: Mapping[str, Any]) -> list[str]:
    head = (
        f"rank {report['rank']} (pid {report.get('pid')} on {report.get('host')}), thread "
        f"{report.get('thread')}, at {format_location(report.get('where'))}:"
    )
    lines = [head, str(report.get("stack", "")).rstrip()]
    recorder = report.get("flight_recorder") or []
    if recorder:
        lines.append("  torch's flight recorder (last collectives of this rank):")
        lines += [f"    {line}" for line in recorder]
    return lines


def report_hang(directory: str, failures: Mapping[int, Any], err: TextIO) -> int | None:
    """Prints the summary when a rank of the failed attempt reported a hang; returns the launcher's exit
    code, else None (the ordinary failure report applies).

    Args:
        directory: the folder given to the ranks in ``ACCELERATE_HANG_REPORT_DIR``.
        failures: global rank -> torch's ProcessFailure, as the elastic agent hands them over.
        err: where to print.
    """
    failed_ranks = sorted(failures)
    reports = read_reports(directory, failed_attempt(failures))
    nccl = read_nccl_dumps(directory)
    if not reports and not nccl:
        return None
    print(summarize(reports, failed_ranks, nccl), file=err)
    return HANG_EXIT_CODE
