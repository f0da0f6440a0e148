"""Which rank the launcher names as the first failure, from the facts torch's agent hands over.

The end-to-end runs (tests/commands/test_launch_cli.py) cover real os._exit / SIGKILL / raise; these
pin the rule on the interleavings a real run produces only sometimes.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from accelerate.launch.failures import report_failures


def _failure(pid: int, exitcode: int, raised_at: float | None = None, error: str = "") -> SimpleNamespace:
    data = {}
    if raised_at is not None:
        text = f"Traceback (most recent call last):\n  ...\n{error}\n"
        data = {"message": {"message": error, "extraInfo": {"py_callstack": text, "time": raised_at}}}
    return SimpleNamespace(pid=pid, exitcode=exitcode, error_file_data=data)


def _report(failures: dict[int, SimpleNamespace], ended_at: dict[int, float]) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = report_failures(failures, out, ended_at)
    return code, [line for line in out.getvalue().splitlines() if line.startswith("accelerate launch")]


def test_a_rank_that_ended_without_a_traceback_is_first_even_if_its_peer_wrote_one_sooner() -> None:
    # The launcher saw rank 1's end at 10.004, after rank 0 had already written its "connection
    # closed" traceback (10.002): ends are compared with ends, and rank 1 ended first.
    failures = {
        0: _failure(100, -signal.SIGTERM, raised_at=10.002, error="RuntimeError: Connection closed by peer"),
        1: _failure(101, -signal.SIGKILL),
    }
    code, lines = _report(failures, {101: 10.004, 100: 10.050})
    assert code == 128 + signal.SIGKILL
    assert lines[0] == "accelerate launch: rank 1 (pid 101) failed with signal SIGKILL (the first to fail)"
    assert lines[1].startswith(
        "accelerate launch: rank 0 ended with signal SIGTERM (stopped by the launcher)"
    )
    assert lines[1].endswith("its last error: RuntimeError: Connection closed by peer")


def test_a_rank_that_raised_first_is_first_even_if_its_peer_ended_sooner() -> None:
    failures = {
        0: _failure(100, 1, raised_at=20.5, error="RuntimeError: Connection closed by peer"),
        1: _failure(101, -signal.SIGTERM, raised_at=20.1, error="ValueError: the real bug"),
    }
    code, lines = _report(failures, {100: 20.6, 101: 20.7})
    assert code == 1  # its own status, not the launcher's SIGTERM that caught it shutting down
    assert lines[0].startswith(
        "accelerate launch: rank 1 (pid 101) failed with exit code 1 (the first to fail)"
    )
    assert lines[1].startswith("accelerate launch: rank 0 ended with exit code 1 after rank 1 failed")


def test_os_exit_status_is_the_launchers_exit_code() -> None:
    failures = {0: _failure(100, -signal.SIGTERM), 1: _failure(101, 3)}
    code, lines = _report(failures, {101: 1.0, 100: 1.2})
    assert code == 3
    assert lines[0] == "accelerate launch: rank 1 (pid 101) failed with exit code 3 (the first to fail)"


def test_without_end_times_the_earliest_traceback_is_first() -> None:
    failures = {
        0: _failure(100, 1, raised_at=5.0, error="KeyError: 'x'"),
        1: _failure(101, 1, 4.0, "OSError"),
    }
    code, lines = _report(failures, {})
    assert code == 1 and lines[0].startswith("accelerate launch: rank 1 ")


_MANY_CHILDREN_END_AT_ONCE = """
import os, sys, time
from accelerate.launch.failures import ExitClock

assert "encodings.ascii" not in sys.modules  # the state in which the old handler failed
clock = ExitClock()
with clock.running():
    pids = []
    for i in range(48):
        pid = os.fork()
        if pid == 0:  # staggered ends: some arrive while the handler is already running
            time.sleep(0.3 + i * 0.0002)
            os._exit(0)
        pids.append(pid)
    deadline = time.time() + 1.5
    while time.time() < deadline:  # pure bytecode: the handler interrupts it, and itself
        pass
for pid in pids:
    os.waitpid(pid, 0)
print(len(clock.ended))
"""


@pytest.mark.skipif(
    not hasattr(os, "fork") or not os.path.isdir("/proc/self/task"), reason="needs fork and /proc"
)
def test_the_exit_clock_survives_many_children_ending_at_once() -> None:
    # Regression: the SIGCHLD handler opened /proc files in text mode; re-entered while the first
    # codec lookup was importing encodings.ascii, it raised "LookupError: unknown encoding: ascii"
    # into torch's agent, and a launch whose ranks had all succeeded exited 1.
    for _ in range(5):  # the race is caught in about 1 run of 3 with the old handler
        result = subprocess.run(
            [sys.executable, "-c", _MANY_CHILDREN_END_AT_ONCE],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert int(result.stdout.split()[-1]) == 48


def test_a_rank_that_called_sys_exit_first_is_first_even_if_its_peer_ended_sooner(tmp_path: Path) -> None:
    # A rank that calls sys.exit(3) still tears down (process group, atexit) while its peer fails on
    # the closed connection and may end sooner; the bootstrap's record of the exit decides.
    script = tmp_path / "exits.py"
    script.write_text("import sys\nsys.exit(3)\n")
    error_file = tmp_path / "error.json"
    result = subprocess.run(
        [sys.executable, "-m", "accelerate.launch.bootstrap", str(script)],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "TORCHELASTIC_ERROR_FILE": str(error_file),
             "PYTHONPATH": str(Path(__file__).parents[2] / "src")},
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    recorded = json.loads(error_file.read_text())
    exited_at = recorded["message"]["extraInfo"]["time"]
    assert "sys.exit(3)" in recorded["message"]["extraInfo"]["py_callstack"]  # where it was called
    failures = {
        0: SimpleNamespace(pid=100, exitcode=3, error_file_data=recorded),
        1: _failure(101, 1, raised_at=exited_at + 0.5, error="RuntimeError: Connection closed by peer"),
    }
    code, lines = _report(failures, {101: exited_at + 0.6, 100: exited_at + 2.0})
    assert code == 3
    assert lines[0].startswith(
        "accelerate launch: rank 0 (pid 100) failed with exit code 3 (the first to fail)"
    )


def test_a_sys_exit_rank_stopped_by_the_agent_while_shutting_down_keeps_its_own_status(
    tmp_path: Path,
) -> None:
    # The agent saw the peer's failure first and sent SIGTERM to the rank still tearing down after
    # sys.exit(3): the report and the launcher's status are still 3, the rank's own.
    script = tmp_path / "exits.py"
    script.write_text("import sys\nsys.exit(3)\n")
    error_file = tmp_path / "error.json"
    subprocess.run(
        [sys.executable, "-m", "accelerate.launch.bootstrap", str(script)],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "TORCHELASTIC_ERROR_FILE": str(error_file),
             "PYTHONPATH": str(Path(__file__).parents[2] / "src")},
    )  # fmt: skip
    recorded = json.loads(error_file.read_text())
    exited_at = recorded["message"]["extraInfo"]["time"]
    failures = {
        0: SimpleNamespace(pid=100, exitcode=-signal.SIGTERM, error_file_data=recorded),
        1: _failure(101, 1, raised_at=exited_at + 0.5, error="RuntimeError: Connection closed by peer"),
    }
    code, lines = _report(failures, {101: exited_at + 0.6, 100: exited_at + 2.0})
    assert code == 3
    assert lines[0].startswith(
        "accelerate launch: rank 0 (pid 100) failed with exit code 3 (the first to fail): it exited"
    )


def test_a_crash_without_a_traceback_is_explained_by_the_fatal_lines_the_rank_printed() -> None:
    failures = {0: _failure(100, -signal.SIGABRT), 1: _failure(101, -signal.SIGTERM)}
    tails = {
        0: "step 3\nterminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
        "  what():  [enforce fail at pair.cc:456] 30 vs 24. Received data size doesn't match expected size.\n",
        1: "accelerate: leaving the process group failed: Connection reset by peer\n",
    }
    out = io.StringIO()
    code = report_failures(failures, out, {100: 1.0, 101: 2.0}, tails)
    assert code == 128 + signal.SIGABRT
    text = out.getvalue()
    assert (
        "  rank 0 wrote on stderr before it ended:\n"
        "    terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
        "    what():  [enforce fail at pair.cc:456] 30 vs 24. Received data size doesn't match expected size.\n"
        + "="
        * 78
    ) in text
    assert "rank 1 wrote" not in text  # nothing fatal in its tail
