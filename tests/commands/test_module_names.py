"""Module-level names of accelerate.commands.config / .launch that clients import (transformers env,
scripts driving the launcher from Python)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from accelerate.commands import config as config_command
from accelerate.commands.launch import launch_command, launch_command_parser
from tests.commands.helpers import REPO, cli_env, run_cli


def test_default_config_file_follows_hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert config_command.default_config_file == str(tmp_path / "accelerate" / "default_config.yaml")
    with pytest.raises(AttributeError):
        config_command.not_a_name  # noqa: B018


def test_load_config_from_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        config_command.load_config_from_file(None)
    assert run_cli("config", "default", "--mixed_precision", "bf16", home=tmp_path).returncode == 0
    config = config_command.load_config_from_file(None)
    assert config.to_dict()["mixed_precision"] == "bf16"
    explicit = config_command.load_config_from_file(config_command.default_config_file)
    assert explicit.to_dict() == config.to_dict()


def test_launch_command_parser_standalone_and_as_subcommand() -> None:
    args = launch_command_parser().parse_args(["--num_processes", "2", "--cpu", "train.py", "--epochs", "3"])
    assert args.num_processes == 2 and args.cpu and args.training_script == "train.py"
    assert args.training_script_args == ["--epochs", "3"]
    import argparse

    sub = argparse.ArgumentParser().add_subparsers()
    assert launch_command_parser(sub).prog.endswith("launch")


def test_launch_command_runs_a_script(tmp_path: Path) -> None:
    script = tmp_path / "hello.py"
    script.write_text(
        "import sys\nfrom accelerate import PartialState\nsys.exit(3 if PartialState().num_processes != 1 else 0)\n"
    )
    failing = tmp_path / "fail.py"
    failing.write_text("raise SystemExit(5)\n")
    code = (
        "import sys\nfrom accelerate.commands.launch import launch_command, launch_command_parser\n"
        "p = launch_command_parser()\nlaunch_command(p.parse_args(['--cpu', sys.argv[1]]))\n"
        "import subprocess\ntry:\n    launch_command(p.parse_args(['--cpu', sys.argv[2]]))\n"
        "except subprocess.CalledProcessError as e:\n    print('exit', e.returncode)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(script), str(failing)], env=cli_env(tmp_path / "home"),
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "exit 5"
    assert callable(launch_command)


def test_write_basic_config(tmp_path: Path) -> None:
    from accelerate.utils import write_basic_config

    target = tmp_path / "cfg" / "default_config.yaml"
    written = write_basic_config(mixed_precision="bf16", save_location=str(target))
    assert written == target and target.is_file()
    assert config_command.load_config_from_file(str(target)).to_dict()["mixed_precision"] == "bf16"
    assert write_basic_config(save_location=str(target)) is False  # an existing file is left alone
    with pytest.raises(ValueError, match="write_basic_config"):
        write_basic_config(mixed_precision="fp12", save_location=str(tmp_path / "other.yaml"))
