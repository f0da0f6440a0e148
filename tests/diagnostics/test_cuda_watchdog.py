"""The hang watchdog on a CUDA GPU in one process: its report and the launcher's NCCL dump reader both
show torch's NCCL flight recorder (real NCCL collectives on a one-rank group, in a fresh process).

A real two-rank NCCL hang needs two GPUs (tests/launch/test_hang_diagnosis.py, ``multi_gpu``).
Marked ``cuda``: skipped without a GPU (conftest).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelerate.diagnostics.rank_report import HANG_EXIT_CODE

pytestmark = pytest.mark.cuda

SCRIPT = Path(__file__).resolve().parent / "scripts" / "nccl_watchdog_one_rank.py"
REPO = Path(__file__).resolve().parents[2]


def test_the_watchdog_report_carries_nccls_flight_recorder(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "TORCH_NCCL", "TORCH_FR"))}
    env.update({"TORCH_FR_BUFFER_SIZE": "100", "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"})
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=90)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["exits"] == [HANG_EXIT_CODE], proc.stderr
    assert result["report_operation"] == "all_reduce"
    for key in ("in_process", "report_recorder", "dump"):
        assert any("nccl:all_reduce" in line for line in result[key]), (key, result, proc.stderr)
