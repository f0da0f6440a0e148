"""`accelerate config` (scripted plain prompts and arrow-key menus in a pty), `config default/update`, `env`."""

from __future__ import annotations

import os
import select
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from accelerate.commands.accelerate_cli import main
from tests.commands.helpers import accelerate_cmd, cli_env, run_cli

BASE = {
    "compute_environment": "LOCAL_MACHINE", "debug": False, "downcast_bf16": "no", "enable_cpu_affinity": False,
    "machine_rank": 0, "main_training_function": "main", "num_machines": 1, "rdzv_backend": "static",
    "same_network": True,
}  # fmt: skip


def test_plain_prompts_multi_machine(tmp_path: Path) -> None:
    answers = "2\n2\n1\n10.0.0.1\n29555\ny\nc10d\n5\n4\nn\ny\neager\nn\nn\nfp16\n"  # 5 is rejected: not a multiple of 2
    result = run_cli("config", stdin=answers, home=tmp_path, CUDA_VISIBLE_DEVICES="")
    assert result.returncode == 0, result.stdout + result.stderr
    path = tmp_path / "accelerate" / "default_config.yaml"
    assert f"accelerate configuration saved at {path}" in result.stdout
    assert "multiple of the number of machines" in result.stdout
    assert yaml.safe_load(path.read_text()) == {
        **BASE, "distributed_type": "MULTI_CPU", "use_cpu": True, "num_machines": 2, "machine_rank": 1,
        "main_process_ip": "10.0.0.1", "main_process_port": 29555, "rdzv_backend": "c10d", "num_processes": 4,
        "dynamo_config": {"dynamo_backend": "EAGER"}, "mixed_precision": "fp16",
    }  # fmt: skip
    # No question about GPUs was asked on a machine without one.
    assert "GPU" not in result.stdout.replace("multi-GPU", "")


def test_plain_prompts_stop_cleanly_when_input_ends(tmp_path: Path) -> None:
    result = run_cli("config", "--config_file", str(tmp_path / "c.yaml"), stdin="1\n", home=tmp_path,
                     CUDA_VISIBLE_DEVICES="")  # fmt: skip
    assert result.returncode == 1
    assert "nothing was written" in result.stderr and not (tmp_path / "c.yaml").exists()


def _expect(fd: int, text: str, seen: list[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text not in "".join(seen):
        if time.monotonic() > deadline:
            raise AssertionError(f"never saw {text!r}; screen so far: {''.join(seen)[-2000:]!r}")
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen.append(os.read(fd, 65536).decode(errors="replace"))
            except OSError:
                break


def test_arrow_key_menus_in_a_pty(tmp_path: Path) -> None:
    pytest.importorskip("questionary")
    import pty

    target = tmp_path / "menu.yaml"
    master, slave = pty.openpty()
    env = cli_env(
        tmp_path, CUDA_VISIBLE_DEVICES="", TERM="xterm", COLUMNS="120", LINES="40", PROMPT_TOOLKIT_NO_CPR="1"
    )
    process = subprocess.Popen(accelerate_cmd("config", "--config_file", str(target)), stdin=slave, stdout=slave,
                               stderr=slave, env=env, close_fds=True)  # fmt: skip
    os.close(slave)
    seen: list[str] = []
    down, enter = "\x1b[B", "\r"
    try:
        steps = [
            ("Which type of machine", down + enter),  # multi-CPU
            ("How many different machines", enter),  # default 1
            ("How many processes in total", enter),  # default 2
            ("Check distributed operations", "n"),
            ("torch dynamo", "n"),
            ("parallelism config", "n"),
            ("mixed precision", down + down + enter),  # bf16
        ]
        for prompt, keys in steps:
            _expect(master, prompt, seen)
            seen.clear()
            os.write(master, keys.encode())
        _expect(master, "configuration saved at", seen)
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        os.close(master)
    assert yaml.safe_load(target.read_text()) == {
        **BASE,
        "distributed_type": "MULTI_CPU",
        "use_cpu": True,
        "num_processes": 2,
        "mixed_precision": "bf16",
    }


def test_config_default_and_update(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "d.yaml"
    assert main(["config", "default", "--config_file", str(target), "--mixed_precision", "bf16"]) == 0
    data = yaml.safe_load(target.read_text())
    assert data["mixed_precision"] == "bf16" and data["num_processes"] >= 1
    assert main(["config", "default", "--config_file", str(target)]) == 1  # never overwrites silently
    assert "already exists" in capsys.readouterr().err
    old = tmp_path / "old.yaml"
    old.write_text(
        "compute_environment: LOCAL_MACHINE\nfp16: true\ndynamo_backend: INDUCTOR\nnum_processes: 1\n"
    )
    assert main(["config", "update", "--config_file", str(old)]) == 0
    assert "from schema version 1" in capsys.readouterr().out
    assert yaml.safe_load(old.read_text()) == {
        "compute_environment": "LOCAL_MACHINE", "mixed_precision": "fp16", "num_processes": 1,
        "dynamo_config": {"dynamo_backend": "INDUCTOR"},
    }  # fmt: skip


def test_env_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("ACCELERATE_CONFIG_FILE", raising=False)
    config = tmp_path / "accelerate" / "default_config.yaml"
    config.parent.mkdir()
    config.write_text("num_processes: 2\nuse_cpu: true\n")
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    import torch

    for needle in ("- `Accelerate` version:", "- Python version:", torch.__version__, "- PyTorch version:",
                   "- Numpy version:", "- Platform:", "CUDA available", f"Config file: {config}",
                   "\t- num_processes: 2"):  # fmt: skip
        assert needle in out, needle
