"""The CI-sized chaos run: one fault of each kind in one run of the bundled example, and the checks' teeth.

The run (about a minute on two busy cores) is deterministic: the seed fixes each fault's rank, step
and file, and every fault lands at a step boundary the worker announces (no sleeps decide anything).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from tests.chaos.checks import check_checkpoints, compare_final, marked_processes
from tests.chaos.plan import KINDS, SCENARIOS, Job, make_plan, random_kinds
from tests.chaos.report import survivals
from tests.chaos.soak import END_CHECKS, Round, chaos_round, reference_run

SEED = 11
SCENARIO = SCENARIOS["restart"]
# The stalled rank is found by its peer's hang watchdog after 3/4 of the process group's timeout:
# 6 s here instead of make chaos's 15 s (Job's 20 s). A healthy collective waits only for the other
# rank to arrive: the two processes of a start begin within 0.8 s of each other at load 15-20 (the
# workers' pid files), and their steps take milliseconds, so 6 s stays above 7x that skew.
JOB = Job(process_group_timeout=8.0)


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Round]:
    root = tmp_path_factory.mktemp("chaos")
    # The uninterrupted run goes on beside the round (its own port, marker and folder): the round
    # spends much of its time waiting (for a relaunch, a hang watchdog) and reads the reference last.
    with ThreadPoolExecutor(max_workers=1) as background:
        reference = background.submit(reference_run, root / "reference", JOB, SCENARIO)
        done = chaos_round(root / "round", SEED, JOB, SCENARIO, list(SCENARIO.kinds), reference.result)
        return reference.result(), done


@pytest.mark.timeout(400)
def test_a_run_through_one_fault_of_each_kind_ends_like_an_uninterrupted_one(
    chaos: tuple[Path, Round],
) -> None:
    _, done = chaos
    assert done.passed, done.report + "\n" + done.result.output()[-6000:]
    rows = {row.delivered.fault.kind: row for row in survivals(done.result)}
    assert sorted(rows) == sorted(SCENARIO.kinds)
    assert rows["kill_launcher"].how.startswith("relaunch")
    # Each fault cost exactly one new start of the processes: no healthy wait outlived the short
    # hang deadline (JOB), or its watchdog would have ended a start of its own.
    starts = list((done.result.folder / "events").glob("pid_0_*"))  # one per start of rank 0
    assert len(starts) == len(SCENARIO.kinds) + 1, done.report
    for kind in ("kill_rank", "stall_rank", "disk_full", "kill_in_save"):
        assert rows[kind].how.startswith("restart attempt"), done.report
    for row in rows.values():
        # Resumed from a checkpoint at or before the fault, never from a step the run had not reached.
        assert row.resumed_from is not None and row.resumed_from <= row.delivered.fault.step, done.report
        assert row.lost_s is not None and row.lost_s > 0
    # Where a tmpfs can be mounted (root, as in CI) the fault fills it; elsewhere one file's write raises.
    expected = "tmpfs filled" if done.tmpfs else "ENOSPC raised by the write hook"
    assert rows["disk_full"].delivered.note.startswith(expected), done.report
    # A write fault lands in a save: the run resumes from the checkpoint before it, not from that step.
    assert rows["disk_full"].resumed_from == rows["disk_full"].delivered.fault.step - JOB.checkpoint_every


@pytest.mark.timeout(400)
def test_the_checks_catch_a_corrupted_checkpoint_and_a_different_end(chaos: tuple[Path, Round]) -> None:
    reference, done = chaos
    project = done.result.project
    newest = sorted((project / "checkpoints").glob("checkpoint_*"))[-1]
    target = newest / "optimizer.bin"
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    problems, _ = check_checkpoints(project, JOB.num_processes)
    assert any(newest.name in p and "does not verify" in p for p in problems), problems
    changed = torch.load(reference)
    changed["params"][0] = changed["params"][0] + 1e-7
    other = done.result.folder / "changed.pt"
    torch.save(changed, other)
    assert any("parameter 0" in p for p in compare_final(reference, other))
    assert compare_final(reference, reference) == []


def test_a_process_carrying_the_marker_is_found_as_an_orphan() -> None:
    marker = "test-" + os.urandom(4).hex()
    env = dict(os.environ, CHAOS_MARKER=marker)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        assert marked_processes(marker) == [sleeper.pid]
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()
    assert marked_processes(marker) == []


def test_a_plan_is_fixed_by_its_seed_and_puts_write_faults_in_saves() -> None:
    job = Job()
    kinds = random_kinds(3, SCENARIO, 8)
    assert set(SCENARIO.kinds) <= set(kinds) and len(kinds) == 8
    plan = make_plan(3, job, kinds)
    assert plan == make_plan(3, job, kinds) != make_plan(4, job, kinds)
    steps = [fault.step for fault in plan]
    assert len(set(steps)) == len(steps) and all(1 < s < job.total_steps for s in steps)
    for fault in plan:
        if KINDS[fault.kind].at_save:
            assert fault.step in job.save_steps() and fault.file
            assert fault.rank == 0 or fault.file == f"random_states_{fault.rank}.pkl"


def test_a_job_too_short_for_its_faults_is_refused() -> None:
    with pytest.raises(ValueError, match="no free step left"):
        make_plan(0, Job(epochs=1, train_samples=128), ["disk_full"] * 3)


def test_every_scenario_has_an_end_check_and_known_faults() -> None:
    for name, scenario in SCENARIOS.items():
        assert name in END_CHECKS and scenario.name == name
        assert set(scenario.kinds) <= set(KINDS)
