"""Runs one training job under ``accelerate launch`` and delivers the faults of its plan.

The runner plays the cluster: it starts the launcher (in a session of its own, every process
carrying ``CHAOS_MARKER`` in its environment), watches ``events/`` for a fault the worker announced
at its step, and delivers it: SIGKILL of that process, SIGKILL of the launcher (then, once every
process of that launch is gone, it starts the same command again, as a scheduler requeues a job),
or SIGSTOP (a stalled rank, continued only after its peer's hang watchdog has ended the peer, so
torch's agent need not wait out its 30 s shutdown timeout). Write faults need no delivery: the
worker's write raised ENOSPC, or it waits mid-file for a SIGKILL like the others.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.checks import kill_all, marked_processes, wait_until_gone
from tests.chaos.plan import Fault, Job, Scenario
from tests.commands.helpers import REPO, accelerate_cmd, cli_env, reserved_port

WORKER = Path(__file__).resolve().parent / "worker.py"
EXAMPLE = REPO / "examples" / "train_classifier.py"
# Faults the worker delivers itself (the write raised ENOSPC, or the tmpfs is full).
SELF_DELIVERED = ("disk_full",)
# A launch whose processes outlive its launcher by more than this has orphans (they stop within 2 s).
_ORPHAN_GRACE_S = 15.0


@dataclass
class Delivered:
    fault: Fault
    time: float  # when the worker announced it (the fault's moment)
    pid: int
    ppid: int  # its launcher's pid when it fired
    launch: int
    note: str = ""


@dataclass
class JobResult:
    folder: Path
    marker: str
    returncode: int | None = None
    launches: int = 0
    delivered: list[Delivered] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    error: str = ""

    def output(self) -> str:
        """Every launch's console output, in order."""
        parts = []
        for index in range(self.launches):
            for stream in ("out", "err"):
                path = self.folder / f"launch_{index}.{stream}"
                if path.is_file():
                    parts.append(path.read_text(errors="replace"))
        return "\n".join(parts)

    @property
    def final(self) -> Path:
        return self.folder / "final.pt"

    @property
    def project(self) -> Path:
        return self.folder / "project"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _peer_pid(events: Path, rank: int, stalled: int) -> int | None:
    """The newest process of another rank (each worker leaves ``pid_<rank>_<pid>`` when it starts)."""
    others = [p for p in events.glob("pid_*") if p.name.split("_")[1] != str(rank)]
    others = [p for p in others if int(p.name.split("_")[2]) != stalled]
    if not others:
        return None
    return int(max(others, key=lambda p: p.stat().st_mtime_ns).name.split("_")[2])


class JobRun:
    """One job: launches, fault delivery, relaunches; :meth:`run` returns a :class:`JobResult`."""

    def __init__(
        self,
        folder: Path,
        job: Job,
        scenario: Scenario,
        plan: list[Fault],
        timeout: float,
        ballast: Path | None = None,
    ) -> None:
        self.ballast = ballast
        self.folder = folder
        self.job = job
        self.scenario = scenario
        self.plan = {fault.id: fault for fault in plan}
        self.timeout = timeout
        self.events = folder / "events"
        self.result = JobResult(folder=folder, marker=uuid.uuid4().hex)
        self.handled: set[int] = set()
        self.stalled: list[tuple[int, int]] = []  # (stalled pid, the peer whose end releases it)

    def _command(self, port: int) -> list[str]:
        restarts = len(self.plan) + 2  # every fault but a launcher kill uses one; spare for a slow machine
        return accelerate_cmd(
            "launch", "--cpu", "--num_processes", str(self.job.num_processes), "--main_process_port", str(port),
            "--max_restarts", str(restarts), *self.scenario.launch_flags,
            str(WORKER), "--plan", str(self.folder / "plan.json"), "--events", str(self.events),
            "--out", str(self.result.final), str(EXAMPLE), *self.job.script_args(str(self.result.project)),
        )  # fmt: skip

    def run(self) -> JobResult:
        self.events.mkdir(parents=True, exist_ok=True)
        (self.folder / "plan.json").write_text(
            json.dumps([f.to_json() for f in self.plan.values()], indent=1)
        )
        started = time.monotonic()
        deadline = started + self.timeout
        try:
            while True:
                relaunch = self._one_launch(deadline)
                if not relaunch:
                    break
        finally:
            self.result.wall_s = time.monotonic() - started
            left = wait_until_gone(self.result.marker, _ORPHAN_GRACE_S)
            if left:
                self.result.orphans.append(f"processes alive after the run ended: {left}")
                kill_all(left)
        return self.result

    def _one_launch(self, deadline: float) -> bool:
        """Runs one launch to its end; True when the runner killed the launcher and must start it again."""
        index = self.result.launches
        self.result.launches += 1
        extra = {"CHAOS_BALLAST": str(self.ballast)} if self.ballast is not None else {}
        env = cli_env(self.folder / "home", CHAOS_MARKER=self.result.marker, CHAOS_LAUNCH=str(index), **extra)
        killed_launcher = False
        with (
            reserved_port() as port,
            open(self.folder / f"launch_{index}.out", "w") as out,
            open(self.folder / f"launch_{index}.err", "w") as err,
        ):
            proc = subprocess.Popen(
                self._command(port), env=env, cwd=REPO, stdout=out, stderr=err, start_new_session=True
            )
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    self.result.error = f"the job did not finish within {self.timeout:.0f} s"
                    kill_all([proc.pid, *marked_processes(self.result.marker)])
                    proc.wait()
                    break
                killed_launcher |= self._deliver(proc, index)
                self._release_stalled()
                time.sleep(0.05)
            self.result.returncode = proc.returncode
        if killed_launcher and not self.result.error:
            left = wait_until_gone(self.result.marker, _ORPHAN_GRACE_S)
            if left:
                self.result.orphans.append(f"launch {index}: processes outlived the killed launcher: {left}")
                kill_all(left)
            return True
        return False

    def _deliver(self, proc: subprocess.Popen[bytes], launch: int) -> bool:
        killed_launcher = False
        for path in sorted(self.events.glob("fired_*.json")):
            record = json.loads(path.read_text())
            fault_id = int(record["id"])
            if fault_id in self.handled:
                continue
            self.handled.add(fault_id)
            fault = self.plan[fault_id]
            pid = int(record["pid"])
            delivered = Delivered(
                fault=fault,
                time=float(record["time"]),
                pid=pid,
                ppid=int(record["ppid"]),
                launch=launch,
                note=str(record.get("mode", "")),
            )
            if fault.kind in ("kill_rank", "kill_in_save"):
                os.kill(pid, signal.SIGKILL)
            elif fault.kind == "kill_launcher":
                os.kill(proc.pid, signal.SIGKILL)
                killed_launcher = True
            elif fault.kind == "stall_rank":
                os.kill(pid, signal.SIGSTOP)
                peer = _peer_pid(self.events, fault.rank, pid)
                if peer is not None:
                    self.stalled.append((pid, peer))
            elif fault.kind not in SELF_DELIVERED:
                kill_all(marked_processes(self.result.marker))
                raise ValueError(
                    f"the runner cannot deliver a {fault.kind!r} fault: add it to JobRun._deliver"
                )
            self.result.delivered.append(delivered)
        return killed_launcher

    def _release_stalled(self) -> None:
        for pid, peer in list(self.stalled):
            if not _alive(peer):
                self.stalled.remove((pid, peer))
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
