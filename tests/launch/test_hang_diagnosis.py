"""Contract: a job whose ranks stop meeting in collectives ends with a diagnosis, not a hang.

Real runs of `accelerate launch` with 2 processes on gloo (scripts/hang.py) and an 8 s process-group
timeout: the launcher must exit non-zero well within a minute and name the waiting rank's collective
and the missing rank's function. The subprocess timeout only stops a test that would hang forever.
The CPU launches run side by side (see `launched`); each keeps its own port, folder and timeout.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelerate.diagnostics.rank_report import HANG_EXIT_CODE
from tests.commands.helpers import accelerate_cmd, cli_env, reserved_port

SCRIPT = Path(__file__).resolve().parent / "scripts" / "hang.py"
DDP_STALL = Path(__file__).resolve().parent / "scripts" / "ddp_stall.py"
# The process-group timeout of every launch. The watchdog reports after 3/4 of it (6 s); a healthy
# collective waits only for the other rank to arrive, and the two processes of a start begin within
# 0.8 s of each other even at load 15-20 (tests/chaos/test_chaos.py measured it and uses the same 8 s),
# so the deadline stays above 7x that skew.
TIMEOUT_S = 8
# The launch each CPU test reads. Each waits out most of its process-group timeout asleep, so
# the module starts them all at once (each on its own port and folder) and every test then waits for
# its own: the module takes about one launch's time instead of four.
_CASE_OF_TEST = {
    "test_a_rank_stuck_in_user_code_is_named_with_its_function_and_the_waiting_rank_with_its_gather": "missing",
    "test_ranks_in_different_collectives_are_both_named": "different",
    "test_a_rank_whose_script_ended_waits_for_the_stuck_one_and_both_are_reported": "finished",
    "test_a_rank_stalled_before_its_ddp_backward_is_named_not_the_rank_waiting_in_the_all_reduce": "ddp_stall",
}
# Only stops a launch that would hang forever (four launches share the cores, hence more than one's).
_LAUNCH_TIMEOUT_S = 240


def _command(mode: str, port: int, *flags: str) -> list[str]:
    script, args = (DDP_STALL, [str(TIMEOUT_S)]) if mode == "ddp_stall" else (SCRIPT, [mode, str(TIMEOUT_S)])
    return accelerate_cmd(
        "launch", *flags, "--num_processes", "2", "--main_process_port", str(port), str(script), *args
    )


def _launch(tmp_path: Path, mode: str, *flags: str) -> subprocess.CompletedProcess[str]:
    with reserved_port() as port:
        return subprocess.run(
            _command(mode, port, *flags), env=cli_env(tmp_path), capture_output=True, text=True,
            timeout=_LAUNCH_TIMEOUT_S,
        )  # fmt: skip


class _Running:
    """One `accelerate launch --cpu` started in the background, its output in files of its folder."""

    def __init__(self, mode: str, folder: Path, ports: contextlib.ExitStack) -> None:
        self.folder = folder
        port = ports.enter_context(reserved_port())
        self._out = (folder / "stdout").open("w")
        self._err = (folder / "stderr").open("w")
        self.proc = subprocess.Popen(
            _command(mode, port, "--cpu"), env=cli_env(folder), stdout=self._out, stderr=self._err, text=True
        )

    def result(self) -> subprocess.CompletedProcess[str]:
        try:
            code = self.proc.wait(timeout=_LAUNCH_TIMEOUT_S)
        finally:
            self._out.close()
            self._err.close()
        out, err = ((self.folder / name).read_text() for name in ("stdout", "stderr"))
        return subprocess.CompletedProcess(self.proc.args, code, out, err)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def launched(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, _Running]]:
    """The launches of this session's selected CPU tests, all started at once."""
    modes = {
        _CASE_OF_TEST[name]
        for item in request.session.items
        if (name := getattr(item, "originalname", None)) in _CASE_OF_TEST
    }
    with contextlib.ExitStack() as ports:  # each port held until the module ends
        running = {mode: _Running(mode, tmp_path_factory.mktemp(mode), ports) for mode in sorted(modes)}
        try:
            yield running
        finally:
            for launch in running.values():
                launch.stop()


def _summary(result: subprocess.CompletedProcess[str]) -> str:
    marker = "accelerate launch: hang detected"
    assert marker in result.stderr, result.stderr[-4000:]
    return result.stderr[result.stderr.index(marker) :]


def test_a_rank_stuck_in_user_code_is_named_with_its_function_and_the_waiting_rank_with_its_gather(
    launched: dict[str, _Running],
) -> None:
    result = launched["missing"].result()
    assert result.returncode == HANG_EXIT_CODE
    assert "unreachable" not in result.stdout
    summary = _summary(result)
    head = summary.split("-" * 78)[0]
    assert f"process-group timeout {TIMEOUT_S} s" in head
    assert "waiting: rank 0 waits in `gather`" in head and "[(4, 3):float32]" in head
    assert "hang.py:33 in main()" in head  # the line of the script that called gather
    missing = next(line for line in head.splitlines() if "missing: rank 1" in line)
    assert "is in no accelerate collective" in missing and "in stuck_here()" in missing
    # Then each rank's Python stack, without the launcher's own frames.
    assert "in stuck_here\n    time.sleep(0.2)" in summary
    assert "bootstrap.py" not in summary


def test_ranks_in_different_collectives_are_both_named(launched: dict[str, _Running]) -> None:
    result = launched["different"].result()
    assert result.returncode == HANG_EXIT_CODE
    head = _summary(result).split("-" * 78)[0]
    assert "waiting: rank 0 waits in `gather`" in head
    assert "waiting: rank 1 waits in `reduce`" in head and "[(5,):float32]" in head
    assert "the ranks are in different collectives: rank 0 in `gather` (#2), rank 1 in `reduce` (#2)" in head


def test_a_rank_whose_script_ended_waits_for_the_stuck_one_and_both_are_reported(
    launched: dict[str, _Running],
) -> None:
    result = launched["finished"].result()
    assert result.returncode == HANG_EXIT_CODE
    head = _summary(result).split("-" * 78)[0]
    assert "waiting: rank 0 waits in `barrier at the end of the script`" in head
    assert "missing: rank 1 is in no accelerate collective" in head and "in stuck_here()" in head


def test_a_rank_stalled_before_its_ddp_backward_is_named_not_the_rank_waiting_in_the_all_reduce(
    launched: dict[str, _Running],
) -> None:
    # Before, gloo's receive timeout in rank 0's backward was reported as rank 0's failure.
    result = launched["ddp_stall"].result()
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
