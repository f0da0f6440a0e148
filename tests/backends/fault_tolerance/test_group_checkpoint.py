"""save_state / load_state with FSDP2 inside a replica group of 2 (sharded weights and optimizer
state): a run resumed under the same layout with fault tolerance takes exactly the steps the saving
run took after the save, and ends with the same parameters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("torchft")

from accelerate.backends.fault_tolerance.manager import lighthouse_address, start_lighthouse  # noqa: E402
from tests.backends.fault_tolerance.resume_problem import SAVE_AFTER  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _launch(out: Path, mode: str) -> list[dict[str, Any]]:
    server = start_lighthouse("127.0.0.1:0", min_replicas=1)
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}")
    command = [
        sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--cpu", "--num_processes", "2",
        "--main_process_port", "0", "--use_fsdp", "--fsdp_version", "2", "-m",
        "tests.backends.fault_tolerance.resume_worker", str(out), mode, lighthouse_address(server, "127.0.0.1"),
    ]  # fmt: skip
    try:
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=200)
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    return [json.loads((out / f"{mode}_0_{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.timeout(300)
def test_fsdp2_inside_a_group_resumes_the_exact_next_step(tmp_path: Path) -> None:
    saving = _launch(tmp_path, "ft_save")
    assert (tmp_path / "ckpt").is_dir()
    resumed = _launch(tmp_path, "ft_load")
    for before, after in zip(saving, resumed):
        assert after["loaded_step"] == SAVE_AFTER
        # each process trains its half of the same group batches, from the first one not committed
        assert after["steps"] == before["steps"][SAVE_AFTER:]
        assert len(after["steps"]) == 8 - SAVE_AFTER
        for key, value in before["params"].items():
            torch.testing.assert_close(
                torch.tensor(after["params"][key]), torch.tensor(value), rtol=1e-6, atol=1e-7
            )
