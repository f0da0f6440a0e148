"""The launched processes' bootstrap: workers never outlive their launcher (issue 29)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).parent / "scripts"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (ended, not yet reaped by its new parent) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_workers_end_within_two_seconds_of_a_killed_launcher_saying_why(tmp_path: Path) -> None:
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "accelerate.commands.accelerate_cli",
            "launch",
            "--cpu",
            "--num_processes",
            "2",
            str(SCRIPTS / "orphan.py"),
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    pids: list[int] = []
    try:
        assert _wait_for(lambda: all((tmp_path / f"pid_{r}").is_file() for r in range(2)), 120), (
            "ranks never started"
        )
        time.sleep(0.5)  # both past the barrier: rank 1 blocked in its all_reduce, rank 0 looping
        pids = [int((tmp_path / f"pid_{r}").read_text()) for r in range(2)]
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        killed = time.monotonic()
        assert _wait_for(lambda: not any(_alive(p) for p in pids), 2.0), (
            f"workers still running {time.monotonic() - killed:.1f} s after the launcher died"
        )
        assert launcher.stdout is not None
        output = launcher.stdout.read().decode(errors="replace")
        assert output.count("the launcher (pid") == 2, output[-3000:]
        assert "rank 0" in output and "rank 1" in output
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if launcher.poll() is None:
            launcher.kill()
