"""Replica groups of different sizes (2 and 1) are refused at their first quorum, naming the cause,
instead of a rank without same-rank peers waiting for them until the timeout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torchft")

from accelerate.backends.fault_tolerance.manager import lighthouse_address, start_lighthouse  # noqa: E402
from tests.backends.fault_tolerance.chaos import _spawn  # noqa: E402


@pytest.mark.timeout(180)
def test_groups_of_different_sizes_fail_naming_the_cause(tmp_path: Path) -> None:
    server = start_lighthouse("127.0.0.1:0", min_replicas=2, heartbeat_timeout_ms=500, join_timeout_ms=100)
    lighthouse = lighthouse_address(server, "127.0.0.1")
    processes: list[subprocess.Popen[bytes]] = []
    try:
        # Two groups and min_replicas 2: every quorum has both (group 1, the "victim", never gets
        # to its kill step: no step commits).
        for group, role, size in ((0, "survivor", 2), (1, "victim", 1)):
            processes.append(_spawn(tmp_path, group, lighthouse, role, size, groups=2))
        codes = [process.wait(timeout=150) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        server.shutdown()
    logs = {path.name: path.read_text() for path in tmp_path.glob("log_*.txt")}
    assert all(code != 0 for code in codes), (codes, logs)
    assert all(
        "every replica group must have the same number of processes" in log for log in logs.values()
    ), logs
