"""How each fault was survived, read from the run's own records (``events/progress.log``, the console)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.chaos.plan import KINDS
from tests.chaos.runner import Delivered, JobResult


def reported(delivered: Delivered, output: str) -> bool:
    """Whether the console says what happened to this fault's process (the launcher or the library did)."""
    fault, lines = delivered.fault, output.splitlines()
    if fault.kind in ("kill_rank", "kill_in_save"):
        # "rank 1 (pid N) failed with signal SIGKILL", or "rank 1 ended with signal SIGKILL after ..."
        wanted = (
            f"rank {fault.rank} (pid {delivered.pid}) failed with signal SIGKILL",
            f"rank {fault.rank} ended with signal SIGKILL",
        )
    elif fault.kind == "kill_launcher":
        wanted = (f"the launcher (pid {delivered.ppid}) is gone",)
    elif fault.kind == "stall_rank":
        # A peer's watchdog saw it: "hang watchdog: rank 0 waits in `backward (DDP's ...)` ..."
        waiting = (re.search(r"hang watchdog: rank (\d+) waits in", line) for line in lines)
        return any(found is not None and int(found[1]) != fault.rank for found in waiting)
    else:  # disk_full: the save's error names the cause (and the planned file, when the hook raised it)
        file = fault.file if delivered.note.startswith("ENOSPC raised by the write hook") else ""
        return any("DiskFullError" in line and file in line and "ENOSPC" in line for line in lines)
    return any(text in line for line in lines for text in wanted)


@dataclass(frozen=True)
class Line:
    step: int
    time: float
    launch: int
    attempt: int

    @property
    def incarnation(self) -> tuple[int, int]:
        return (self.launch, self.attempt)


@dataclass(frozen=True)
class Survival:
    delivered: Delivered
    how: str  # "restart attempt 2" / "relaunch 1"
    resumed_from: int | None  # the optimizer step the next incarnation started after
    lost_s: float | None  # from the fault until the run was one step past it again
    evidence: bool

    def line(self) -> str:
        fault = self.delivered.fault
        resumed = "?" if self.resumed_from is None else f"step {self.resumed_from}"
        replayed = "" if self.resumed_from is None else f", {fault.step - self.resumed_from} step(s) replayed"
        lost = "?" if self.lost_s is None else f"{self.lost_s:.1f} s"
        seen = "" if self.evidence else "; NOT reported on the console"
        how = f" ({self.delivered.note})" if fault.kind == "disk_full" and self.delivered.note else ""
        named = fault.describe(with_file=not self.delivered.note.startswith("tmpfs"))
        return f"{named}{how}: survived by {self.how}, resumed from {resumed}{replayed}, {lost} lost{seen}"


def read_progress(events: Path) -> list[Line]:
    path = events / "progress.log"
    if not path.is_file():
        return []
    lines = []
    for raw in path.read_text().splitlines():
        step, when, launch, attempt, _pid = raw.split()
        lines.append(Line(int(step), float(when), int(launch), int(attempt)))
    return lines


def survivals(result: JobResult) -> list[Survival]:
    lines = read_progress(result.folder / "events")
    output = result.output()
    found = []
    for delivered in sorted(result.delivered, key=lambda d: d.time):
        before = [line for line in lines if line.time <= delivered.time]
        current = before[-1].incarnation if before else (delivered.launch, -1)
        after = [line for line in lines if line.time > delivered.time and line.incarnation != current]
        how, resumed, lost = "nothing (the run ended)", None, None
        if after:
            nxt = after[0]
            how = f"relaunch {nxt.launch}" if nxt.launch != current[0] else f"restart attempt {nxt.attempt}"
            resumed = nxt.step - 1
            past = next((line for line in after if line.step > delivered.fault.step), None)
            lost = None if past is None else past.time - delivered.time
        evidence = reported(delivered, output)
        found.append(Survival(delivered, how, resumed, lost, evidence))
    return found


def format_report(result: JobResult, plan_ids: list[int], problems: list[str], notes: list[str]) -> str:
    rows = survivals(result)
    out = [f"  {row.line()}" for row in rows]
    missed = sorted(set(plan_ids) - {row.delivered.fault.id for row in rows})
    out += [f"  fault #{fault_id} was never delivered" for fault_id in missed]
    attempts = {(line.launch, line.attempt) for line in read_progress(result.folder / "events")}
    out.append(
        f"  {len(rows)} fault(s) survived in {result.wall_s:.1f} s: {result.launches} launch(es), "
        f"{len(attempts)} start(s) of the training processes"
    )
    out += [f"  note: {note}" for note in notes]
    out += [f"  PROBLEM: {problem}" for problem in problems]
    return "\n".join(out)


def kinds_legend() -> str:
    return "\n".join(f"  {kind.name}: {kind.what}" for kind in KINDS.values())
