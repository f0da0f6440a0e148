"""`accelerate launch` and `accelerate test` with DeepSpeed configs, on two CPU processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.commands.helpers import reserved_port, run_cli

pytest.importorskip("deepspeed", reason="DeepSpeed tests need deepspeed (make test installs it)")

FILES = Path(__file__).resolve().parent / "files"


def _config(tmp_path: Path) -> Path:
    text = (
        (FILES / "deepspeed.yaml")
        .read_text()
        .replace("DEEPSPEED_CONFIG_JSON", str(FILES / "zero_stage1_config.json"))
    )
    path = tmp_path / "deepspeed.yaml"
    path.write_text(text)
    return path


def test_upstream_deepspeed_template_runs_through_launch(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    with reserved_port() as port:
        done = run_cli(
            "launch", "--config_file", str(_config(tmp_path)), "--main_process_port", str(port),
            str(FILES / "train_script.py"), str(out), home=tmp_path, timeout=600,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["distributed_type"] == "DEEPSPEED" and result["num_processes"] == 2
    assert result["zero_stage"] == 1 and result["engine_stage"] == 1 and result["micro"] == 4
    assert result["epoch_loss"][-1] < result["epoch_loss"][0]


def test_flags_choose_the_stage(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    with reserved_port() as port:
        done = run_cli(
            "launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port), "--use_deepspeed",
            "--zero_stage", "3", "--zero3_save_16bit_model", "true", str(FILES / "train_script.py"), str(out),
            home=tmp_path, timeout=600,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["zero_stage"] == 3 and result["engine_stage"] == 3


def test_accelerate_test_under_a_deepspeed_config(tmp_path: Path) -> None:
    # The self-check trains with torch's SGD, so the config leaves the optimizer to the code (no JSON).
    # On a port of its own (the file names none, so 29500), as another job on the machine may hold that one.
    with reserved_port() as port:
        config = tmp_path / "zero2.yaml"
        config.write_text((FILES / "zero2.yaml").read_text() + f"main_process_port: {port}\n")
        done = run_cli("test", "--config_file", str(config), home=tmp_path, timeout=600)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert "success" in done.stdout
