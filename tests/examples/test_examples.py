"""The scripts under examples/ run for real through `accelerate launch --cpu --num_processes 2`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.commands.helpers import REPO, reserved_port, run_cli

EXAMPLES = REPO / "examples"


def launch(script: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """Runs one example on two CPU processes and fails the test with its output if it fails."""
    with reserved_port() as port:
        result = run_cli("launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port),
                         str(EXAMPLES / script), *args, home=home)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_nlp_example_learns_the_synthetic_task(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    result = launch("nlp_example.py", home=tmp_path)
    # 130 eval samples: gather_for_metrics drops the padding the sampler added for 2 processes.
    assert "on 130 samples" in result.stdout
    accuracy = float(re.search(r"final accuracy ([\d.]+)", result.stdout).group(1))  # type: ignore[union-attr]
    assert accuracy > 0.9
