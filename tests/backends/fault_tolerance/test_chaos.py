"""3 replica groups, one SIGKILLed mid-step: survivors keep their processes and keep committing, the
killed group restarts, heals from a peer and rejoins, and every group ends equal to a reference run
that trains the same batches without failure, each batch once (loopback only; in a network
namespace of its own where ``unshare -n`` works). Groups of one process, and groups of two (DDP or
FSDP2 inside each, launched by ``accelerate launch --num_processes 2``; one process of a group is
killed and its launcher restarts the whole group, each process healing from its same-rank peer)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.backends.fault_tolerance.problem import KILL_STEP

pytest.importorskip("torchft")
ROOT = Path(__file__).resolve().parents[3]


def _isolated() -> list[str]:
    """A private network namespace with only loopback up, where this user may create one."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return []
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    return (
        ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"] if probe.returncode == 0 else []
    )


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("group_size", "inside"), [(1, "ddp"), (2, "ddp"), (2, "fsdp")])
def test_a_killed_replica_group_heals_and_nothing_is_lost(
    tmp_path: Path, group_size: int, inside: str
) -> None:
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}")
    command = [
        *_isolated(), sys.executable, "-m", "tests.backends.fault_tolerance.chaos", str(tmp_path), str(group_size), inside
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=220)
    logs = "\n".join(p.read_text()[-3000:] for p in sorted(tmp_path.glob("log_*.txt")))
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n{logs}"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["group_size"] == group_size, summary
    assert summary["sharded"] == [inside == "fsdp"] * group_size, summary  # FSDP2 inside the group when asked
    assert summary["survivor_pids_unchanged"], summary
    if summary["listen_addresses"] is not None:
        assert summary["listen_addresses"] == ["127.0.0.1"], summary  # bound to the given address only
    assert summary["victim_last_step"] == KILL_STEP - 1, summary
    # The kill landed mid-exchange: that step was skipped (not half-applied) and its batches redrawn
    # (a later skip would be legal too, e.g. a rejoin racing a step; each_batch_once still holds).
    assert summary["skipped_steps"][:1] == [KILL_STEP], summary
    assert all(before == after for before, after in summary["killed_step_redrawn"]), summary
    assert summary["restarted_first_step"] > KILL_STEP, summary  # it healed to the live step
    assert summary["restarted_committed_with_all"] > 0, summary  # and trained again with everyone
    assert summary["groups_equal"], summary
    assert summary["each_batch_once"], summary
    assert summary["max_diff_to_reference"] < 1e-5, summary
    assert summary["heal_s"] is not None, summary
