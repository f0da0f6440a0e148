"""A chaos round: a reference run once, then the same job with a seeded plan of faults, then the checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.chaos.checks import check_checkpoints, compare_final
from tests.chaos.disk import small_disk
from tests.chaos.plan import Fault, Job, Scenario, make_plan
from tests.chaos.report import format_report, survivals
from tests.chaos.runner import JobResult, JobRun

# How each scenario's end is checked against the reference run's final state (a list of problems).
# A fault-tolerant scenario adds its own: every replica equal, and each sample counted once.
END_CHECKS: dict[str, Callable[[Path, Path], list[str]]] = {"restart": compare_final}

# A job that has not finished by then is reported as failed (one round takes about a minute).
_JOB_TIMEOUT_S = 600.0


@dataclass
class Round:
    seed: int
    plan: list[Fault]
    result: JobResult
    problems: list[str]
    report: str
    tmpfs: bool = False  # the project folder was a tmpfs a disk_full fault filled for real

    @property
    def passed(self) -> bool:
        return not self.problems


def reference_run(folder: Path, job: Job, scenario: Scenario) -> Path:
    """The uninterrupted run (no fault planned); returns its final state's path."""
    result = JobRun(folder, job, scenario, [], _JOB_TIMEOUT_S).run()
    if result.returncode != 0 or not result.final.is_file():
        raise RuntimeError(
            f"the reference run failed (exit {result.returncode}) {result.error}:\n{result.output()[-4000:]}"
        )
    return result.final


def chaos_round(
    folder: Path,
    seed: int,
    job: Job,
    scenario: Scenario,
    kinds: list[str],
    reference: Path | Callable[[], Path],
    real_disk: bool = True,
) -> Round:
    """One round; with ``real_disk`` (and root) the project folder is a small tmpfs that a
    ``disk_full`` fault fills for real, else the worker's write hook raises the ENOSPC.

    ``reference`` is the reference run's final state, or a call that waits for it: it is read only
    once the round has ended, so the reference run may go on beside the round.
    """
    plan = make_plan(seed, job, kinds)
    wanted = real_disk and any(fault.kind == "disk_full" for fault in plan)
    with small_disk(folder / "project", wanted) as ballast:
        result = JobRun(folder, job, scenario, plan, _JOB_TIMEOUT_S, ballast).run()
        tmpfs = ballast is not None
    done = _checked(
        folder, seed, job, scenario, plan, result, reference if isinstance(reference, Path) else reference()
    )
    done.tmpfs = tmpfs
    return done


def _checked(
    folder: Path,
    seed: int,
    job: Job,
    scenario: Scenario,
    plan: list[Fault],
    result: JobResult,
    reference: Path,
) -> Round:
    problems: list[str] = []
    if result.error:
        problems.append(result.error)
    if result.returncode != 0:
        problems.append(f"the launcher exited with {result.returncode} (see {folder}/launch_*.err)")
    problems += END_CHECKS[scenario.name](reference, result.final)
    problems += result.orphans
    checkpoint_problems, notes = check_checkpoints(result.project, job.num_processes)
    problems += checkpoint_problems
    rows = survivals(result)
    delivered = {row.delivered.fault.id for row in rows}
    problems += [f"fault {f.describe()} was never delivered" for f in plan if f.id not in delivered]
    problems += [
        f"fault {row.delivered.fault.describe()} left no trace on the console"
        for row in rows
        if not row.evidence
    ]
    report = format_report(result, [f.id for f in plan], problems, notes)
    return Round(seed=seed, plan=plan, result=result, problems=problems, report=report)
