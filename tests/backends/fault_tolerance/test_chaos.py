"""3 replica groups, one SIGKILLed mid-step: survivors keep their processes and keep committing, the
killed group restarts, heals from a peer and rejoins, and every group ends equal to a reference run
that trains the same batches without failure, each batch once (loopback only; in a network
namespace of its own where ``unshare -n`` works). Groups of one process, groups of two (DDP or
FSDP2 inside each, launched by ``accelerate launch --num_processes 2``; one process of a group is
killed and its launcher restarts the whole group, which heals from a peer group: through its rank 0
with DDP, each process from its same-rank peer with FSDP2). DDP runs as groups of 1, 2 and 2
processes (the victim one of 2): that case makes every check a DDP groups-of-2 run would (a group
of 2 killed, restarted by its launcher and healed through its rank 0; a surviving group of 2 keeps
its processes), plus groups of different sizes meeting, so no separate groups-of-2 DDP case runs.
Every process's learning rate ends as the reference's after the same batches."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchft")
from tests.backends.fault_tolerance.chaos import problems_in  # noqa: E402 (imports torchft)

ROOT = Path(__file__).resolve().parents[3]


def _isolated() -> list[str]:
    """A private network namespace with only loopback up, where this user may create one."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return []
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    return (
        ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"] if probe.returncode == 0 else []
    )


def _diagnosis(out: Path) -> str:
    """What a failed run left: each group's step log in short (who took part, what committed), then
    the tail of each group's output (a CI failure must be diagnosable from the report alone)."""
    lines = []
    for path in sorted(out.glob("steps_*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
        steps = " ".join(f"{r['step']}:{r['participants']}{'' if r['committed'] else 'x'}" for r in records)
        lines.append(f"{path.name} (step:participants, x skipped): {steps or '-'}")
    for path in sorted(out.glob("log_*.txt")):
        # torchft's routine quorum and commit lines would fill the tail; its healing lines stay
        kept = [line for line in path.read_text().splitlines() if "[torchft::" not in line or "heal" in line]
        lines.append(f"--- {path.name} (tail)\n" + "\n".join(kept)[-2500:])
    return "\n".join(lines)


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("group_size", "inside"), [("1", "ddp"), ("2", "fsdp"), ("1,2,2", "ddp")])
def test_a_killed_replica_group_heals_and_nothing_is_lost(
    tmp_path: Path, group_size: str, inside: str
) -> None:
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}")
    command = [
        *_isolated(), sys.executable, "-m", "tests.backends.fault_tolerance.chaos", str(tmp_path), str(group_size), inside
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n{_diagnosis(tmp_path)}"
    summary = json.loads((tmp_path / "summary.json").read_text())
    # Survivors keep their processes; the kill step is skipped (not half-applied) and its batches
    # redrawn; the restarted group heals to the live step and trains with everyone again; every
    # group ends equal to the reference, each batch once (problems_in names each check).
    assert problems_in(summary, group_size, inside) == [], _diagnosis(tmp_path)
