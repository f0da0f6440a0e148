"""The ``fault_tolerance`` scenario of ``make chaos``: a replica group killed while the others step.

Each round draws, from its seed, the replica groups' size (1 or 2 processes) and what runs inside a
group of 2 (DDP or FSDP2), then runs the fault-tolerance harness
(``tests/backends/fault_tolerance/chaos.py``: 3 groups on torchft, one process SIGKILLed mid-step,
its group restarted and healed from a live peer) inside a network namespace of its own where it
can. The end is checked as the suite checks it: survivors kept their processes, the kill step was
skipped and its batches drawn again, every group equal to a reference that trained the same batches
without failure, and each batch trained exactly once.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LIMIT_S = 300


@dataclass
class ReplicaRound:
    seed: int
    group_size: int
    inside: str
    problems: list[str]
    report: str

    @property
    def passed(self) -> bool:
        return not self.problems


def _isolated() -> list[str]:
    """A private network namespace with only loopback up, where this user may create one."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return []
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        return []
    return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]


def replica_round(folder: Path, seed: int) -> ReplicaRound:
    draw = random.Random(seed)
    group_size = draw.choice([1, 2])
    inside = draw.choice(["ddp", "fsdp"]) if group_size == 2 else "ddp"
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}")
    command = [
        *_isolated(), sys.executable, "-m", "tests.backends.fault_tolerance.chaos", str(folder), str(group_size), inside
    ]  # fmt: skip
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=_LIMIT_S)
    except subprocess.TimeoutExpired:
        return ReplicaRound(seed, group_size, inside, [f"the harness ran past {_LIMIT_S} s"], "")
    elapsed = time.monotonic() - started
    summary_file = folder / "summary.json"
    if done.returncode != 0 or not summary_file.is_file():
        tail = (done.stdout + done.stderr)[-3000:]
        return ReplicaRound(seed, group_size, inside, [f"the harness exited with {done.returncode}"], tail)
    from tests.backends.fault_tolerance.chaos import problems_in

    summary = json.loads(summary_file.read_text())
    report = (
        f"  3 replica groups of {group_size} process(es), {inside.upper()} inside; one process SIGKILLed "
        f"mid-step: survivors' next committed step {summary['kill_to_next_commit_s']:.2f} s after the "
        f"kill, the restarted group healed in {summary['heal_s']:.3f} s and committed "
        f"{summary['restarted_committed_with_all']} step(s) with every group; largest difference to the "
        f"reference {summary['max_diff_to_reference']:.1e}; {elapsed:.0f} s"
    )
    return ReplicaRound(seed, group_size, inside, problems_in(summary, group_size, inside), report)
