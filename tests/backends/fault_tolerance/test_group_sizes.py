"""FSDP2 replica groups meet the others process by process (each holds its own shard), so an FSDP2
group of 2 with a group of 1 is refused at their first quorum, naming the cause, instead of a rank
without same-rank peers waiting for them until the timeout. (DDP groups of different sizes meet
through their rank 0: the chaos test runs groups of 1, 2 and 2.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytest.importorskip("torchft")

from accelerate.backends.fault_tolerance.manager import lighthouse_address, start_lighthouse  # noqa: E402
from tests.backends.fault_tolerance.chaos import _spawn  # noqa: E402


@pytest.mark.timeout(180)
def test_an_fsdp2_group_and_a_group_of_another_size_fail_naming_the_cause(tmp_path: Path) -> None:
    server = start_lighthouse("127.0.0.1:0", min_replicas=2, heartbeat_timeout_ms=500, join_timeout_ms=100)
    lighthouse = lighthouse_address(server, "127.0.0.1")
    processes: list[subprocess.Popen[bytes]] = []
    try:
        # Two groups and min_replicas 2: every quorum has both (group 1, the "victim", never gets
        # to its kill step: no step commits).
        for group, role, size in ((0, "survivor", 2), (1, "victim", 1)):
            processes.append(_spawn(tmp_path, group, lighthouse, role, size, fsdp=size == 2, groups=2))
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
