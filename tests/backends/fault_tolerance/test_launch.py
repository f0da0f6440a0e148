"""``accelerate launch --fault_tolerance``: the flags reach the script as a fault-tolerant run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchft")
ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelerate import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = DataLoader(TensorDataset(torch.randn(16, 3), torch.randn(16, 1)), batch_size=4)
model, optimizer, data = accelerator.prepare(model, optimizer, data)
for x, y in data:
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
    optimizer.zero_grad()
records = accelerator.strategy.runtime.records
print("RESULT", type(accelerator.strategy).__name__, accelerator.strategy.settings.min_replicas,
      len(records), all(r.committed for r in records))
accelerator.strategy.release()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(120)
def test_one_group_launched_with_its_own_lighthouse_trains_every_batch(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    command = [
        sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--fault_tolerance",
        "--ft_start_lighthouse", "--ft_lighthouse", f"127.0.0.1:{_free_port()}", "--ft_num_replica_groups", "1",
        "--ft_min_replicas", "1", str(script),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULT FaultTolerantStrategy 1 4 True" in done.stdout, done.stdout[-2000:]


def test_ft_flags_without_fault_tolerance_are_refused(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    command = [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--ft_min_replicas", "2",
               "--dry_run", "train.py"]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--ft_min_replicas needs --fault_tolerance" in done.stderr
