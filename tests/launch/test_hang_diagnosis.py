"""Contract: a job whose ranks stop meeting in collectives ends with a diagnosis, not a hang.

Real runs of `accelerate launch` with 2 processes on gloo (scripts/hang.py) and a 15 s process-group
timeout: the launcher must exit non-zero well within a minute and name the waiting rank's collective
and the missing rank's function. The subprocess timeout only stops a test that would hang forever.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from accelerate.diagnostics.rank_report import HANG_EXIT_CODE
from tests.commands.helpers import accelerate_cmd, cli_env, reserved_port

SCRIPT = Path(__file__).resolve().parent / "scripts" / "hang.py"
DDP_STALL = Path(__file__).resolve().parent / "scripts" / "ddp_stall.py"


def _launch(
    tmp_path: Path, mode: str, *flags: str, script: Path = SCRIPT
) -> subprocess.CompletedProcess[str]:
    args = [mode, "15"] if script == SCRIPT else ["15"]
    with reserved_port() as port:
        return subprocess.run(
            accelerate_cmd("launch", *flags, "--num_processes", "2", "--main_process_port", str(port),
                           str(script), *args),
            env=cli_env(tmp_path), capture_output=True, text=True, timeout=120,
        )  # fmt: skip


def _summary(result: subprocess.CompletedProcess[str]) -> str:
    marker = "accelerate launch: hang detected"
    assert marker in result.stderr, result.stderr[-4000:]
    return result.stderr[result.stderr.index(marker) :]


def test_a_rank_stuck_in_user_code_is_named_with_its_function_and_the_waiting_rank_with_its_gather(
    tmp_path: Path,
) -> None:
    result = _launch(tmp_path, "missing", "--cpu")
    assert result.returncode == HANG_EXIT_CODE
    assert "unreachable" not in result.stdout
    summary = _summary(result)
    head = summary.split("-" * 78)[0]
    assert "process-group timeout 15 s" in head
    assert "waiting: rank 0 waits in `gather`" in head and "[(4, 3):float32]" in head
    assert "hang.py:33 in main()" in head  # the line of the script that called gather
    missing = next(line for line in head.splitlines() if "missing: rank 1" in line)
    assert "is in no accelerate collective" in missing and "in stuck_here()" in missing
    # Then each rank's Python stack, without the launcher's own frames.
    assert "in stuck_here\n    time.sleep(0.2)" in summary
    assert "bootstrap.py" not in summary


def test_ranks_in_different_collectives_are_both_named(tmp_path: Path) -> None:
    result = _launch(tmp_path, "different", "--cpu")
    assert result.returncode == HANG_EXIT_CODE
    head = _summary(result).split("-" * 78)[0]
    assert "waiting: rank 0 waits in `gather`" in head
    assert "waiting: rank 1 waits in `reduce`" in head and "[(5,):float32]" in head
    assert "the ranks are in different collectives: rank 0 in `gather` (#2), rank 1 in `reduce` (#2)" in head


def test_a_rank_whose_script_ended_waits_for_the_stuck_one_and_both_are_reported(tmp_path: Path) -> None:
    result = _launch(tmp_path, "finished", "--cpu")
    assert result.returncode == HANG_EXIT_CODE
    head = _summary(result).split("-" * 78)[0]
    assert "waiting: rank 0 waits in `barrier at the end of the script`" in head
    assert "missing: rank 1 is in no accelerate collective" in head and "in stuck_here()" in head


def test_a_rank_stalled_before_its_ddp_backward_is_named_not_the_rank_waiting_in_the_all_reduce(
    tmp_path: Path,
) -> None:
    # Before, gloo's receive timeout in rank 0's backward was reported as rank 0's failure.
    result = _launch(tmp_path, "", "--cpu", script=DDP_STALL)
    assert result.returncode == HANG_EXIT_CODE, result.stderr[-4000:]
    assert "unreachable" not in result.stdout
    summary = _summary(result)
    head = summary.split("-" * 78)[0]
    assert "waiting: rank 0 waits in `backward (DDP's gradient all-reduce)`" in head
    assert "ddp_stall.py:35 in main()" in head  # the line that called accelerator.backward
    missing = next(line for line in head.splitlines() if "missing: rank 1" in line)
    assert "is in no accelerate collective" in missing and "in stuck_before_backward()" in missing
    assert "in stuck_before_backward\n    time.sleep(0.2)" in summary
    assert "failed with exit code 1" not in result.stderr  # rank 0 is not blamed for waiting


@pytest.mark.multi_gpu
def test_on_nccl_the_hang_is_reported_too(tmp_path: Path) -> None:
    # NCCL collectives return before they complete, so the hang may surface later (when the stream
    # is waited on): torch's own NCCL watchdog then dumps its flight recorder where the launcher looks.
    result = _launch(tmp_path, "missing", "--multi_gpu")
    assert result.returncode != 0
    summary = _summary(result)
    assert "rank 1" in summary
    assert "stuck_here" in summary or "NCCL flight recorder" in summary
