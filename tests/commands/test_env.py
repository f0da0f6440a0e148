"""``accelerate env`` prints upstream's report layout: the labels bug-report templates and scripts read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from accelerate.commands.accelerate_cli import main

UPSTREAM_LABELS = (
    "`Accelerate` version", "Platform", "`accelerate` bash location", "Python version", "Numpy version",
    "PyTorch version", "PyTorch accelerator", "System RAM",
)  # fmt: skip


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["env", *args]) == 0
    return capsys.readouterr().out


def test_upstreams_labels_in_upstreams_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import platform

    import torch

    import accelerate

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("ACCELERATE_CONFIG_FILE", raising=False)
    out = _report(capsys)
    assert "Copy-and-paste the text below in your GitHub issue" in out
    labels = [line[2:].split(": ", 1)[0] for line in out.splitlines() if line.startswith("- ")]
    assert labels[: len(UPSTREAM_LABELS)] == list(UPSTREAM_LABELS)
    rows = dict(
        line[2:].split(": ", 1) for line in out.splitlines() if line.startswith("- ") and ": " in line
    )
    assert rows["`Accelerate` version"] == accelerate.__version__
    assert rows["Python version"] == platform.python_version()
    assert rows["PyTorch version"] == torch.__version__
    expected = (
        {"CUDA"} if torch.cuda.is_available() else {"N/A", "MPS", "XPU", "NPU", "MLU", "MUSA", "SDAA", "HPU"}
    )
    assert rows["PyTorch accelerator"] in expected
    assert re.fullmatch(r"\d+\.\d\d GB", rows["System RAM"])
    assert out.rstrip().endswith("- `Accelerate` default config:\n\tNot found")


def test_default_config_block_lists_the_file_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ACCELERATE_CONFIG_FILE", raising=False)
    config = tmp_path / "cfg.yaml"
    config.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\n")
    out = _report(capsys, "--config_file", str(config))
    block = out.split("- `Accelerate` default config:\n", 1)[1].splitlines()
    assert "\t- distributed_type: MULTI_CPU" in block and "\t- num_processes: 2" in block
    assert "\t- compute_environment: LOCAL_MACHINE" in block  # defaults filled in, as upstream
    config.write_text("num_processes: [\n")
    assert "\tcannot be read:" in _report(capsys, "--config_file", str(config))
