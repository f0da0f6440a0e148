"""`accelerate env` and `accelerate test` on a CUDA GPU, as real subprocesses (an isolated HF_HOME).

Marked ``cuda``: skipped without a GPU (conftest); ``make gpu-check`` runs them on a lent GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.commands.helpers import run_cli

pytestmark = pytest.mark.cuda


def test_env_reports_the_gpu(tmp_path: Path) -> None:
    result = run_cli("env", home=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # Upstream's labels; the GPU's type is printed only when CUDA is available.
    assert "- PyTorch accelerator: CUDA" in result.stdout, result.stdout
    assert f"- GPU type: {torch.cuda.get_device_name(0)}" in result.stdout


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_self_check_passes_on_the_gpu(tmp_path: Path, precision: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nnum_processes: 1\nuse_cpu: false\n"
        f"mixed_precision: '{precision}'\n"
    )
    result = run_cli("test", "--config_file", str(config), home=tmp_path, timeout=150)
    out = result.stdout
    assert "VERDICT: all checks passed." in out, out + result.stderr
    assert "cuda:0" in out  # the device check ran on the GPU
    assert f"mixed_precision={precision}" in out
    assert result.returncode == 0
