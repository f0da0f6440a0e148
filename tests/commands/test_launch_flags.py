"""Every flag of upstream's command line parses; flags of features that cannot run here are refused at
plan time, each by name with its feature (one table in launch/checks.py)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from accelerate.commands import accelerate_cli
from accelerate.commands.launch import REFUSED_FLAGS, make_plan
from accelerate.launch.checks import LaunchError, refused_flag_reason
from tests.commands.helpers import run_cli
from tests.helpers.reference import REFERENCE


def _reference_commands() -> dict[str, list[tuple[str, str]]]:
    """``{"launch": [("--tee", "(type str; default '0')"), ...], "config default": [...], ...}``."""
    text = REFERENCE.read_text(encoding="utf-8")
    section = text.split("## Command line (`accelerate ...`)", 1)[1].split("\n## ", 1)[0]
    commands: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in section.splitlines():
        heading = re.match(r"### accelerate ([\w -]+?)(\s+\[missing\])?$", line)
        if heading:
            current = heading.group(1).strip()
            commands[current] = []
        elif current and line.startswith("- -"):
            names, _, rest = line[2:].partition("  ")
            commands[current].append((names.split(" / ")[0].strip(), rest))
    return commands


needs_reference = pytest.mark.skipif(not REFERENCE.is_file(), reason=f"reference not found at {REFERENCE}")
COMMANDS = _reference_commands() if REFERENCE.is_file() else {}


def _parser(command: str) -> argparse.ArgumentParser:
    root = command.split()[0]
    parser = accelerate_cli.build_parser(root)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices[root]
    for word in command.split()[1:]:
        nested = next(a for a in found._actions if isinstance(a, argparse._SubParsersAction))
        found = nested.choices[word]
    return found


def _sample(rest: str) -> list[str]:
    """A value for a flag from the reference's description: a choice, a number, or a word."""
    if "(switch)" in rest or rest.strip().startswith("(default True)"):
        return []
    choices = re.search(r"choices \['([^']+)'", rest)
    if choices:
        return [choices.group(1)]
    if "type int" in rest:
        return ["1"]
    if "type float" in rest:
        return ["0.5"]
    if "str_to_bool" in rest or "type bool" in rest:
        return ["true"]
    return ["x"]


@needs_reference
def test_the_reference_lists_the_commands() -> None:
    assert {"launch", "config", "config default", "env", "merge-weights", "tpu-config", "to-fsdp2"} <= set(
        COMMANDS
    )


@needs_reference
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_reference_flag_is_known(command: str) -> None:
    parser = _parser(command)
    known = set(parser._option_string_actions)
    missing = [flag for flag, _ in COMMANDS[command] if flag not in known]
    assert not missing, f"accelerate {command} lacks {missing}"


@needs_reference
def test_every_launch_flag_parses_with_a_value() -> None:
    parser = _parser("launch")
    for flag, rest in COMMANDS["launch"]:
        args = parser.parse_args([flag, *_sample(rest), "train.py", "--lr", "1"])
        assert args.training_script == "train.py" and args.training_script_args == ["--lr", "1"], flag
        dashed = flag.replace("_", "-")
        if dashed != flag and dashed.startswith("--"):
            parser.parse_args([dashed, *_sample(rest), "train.py"])


@pytest.mark.parametrize("name", sorted(REFUSED_FLAGS))
def test_each_refused_flag_names_itself_and_its_feature(name: str) -> None:
    kwargs = REFUSED_FLAGS[name]
    value = True if kwargs.get("action") == "store_true" else (kwargs.get("choices") or ["1"])[0]
    args = _parser("launch").parse_args(["--cpu", *_as_argv(name, value), "train.py"])
    with pytest.raises(LaunchError) as caught:
        make_plan(args, {}, quiet=True)
    message = str(caught.value)
    assert f"--{name}" in message and refused_flag_reason(name) in message


def _as_argv(name: str, value: object) -> list[str]:
    return [f"--{name}"] if value is True else [f"--{name}", str(value)]


def test_a_tuning_flag_names_the_switch_that_is_off() -> None:
    args = _parser("launch").parse_args(["--fsdp_offload_params", "true", "train.py"])
    with pytest.raises(
        LaunchError, match=r"--fsdp_offload_params configures FSDP, which is off \(no --use_fsdp"
    ):
        make_plan(args, {}, quiet=True)


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        (
            ["--use_deepspeed", "--deepspeed_hostfile", "h"],
            ["--deepspeed_hostfile", "multi-machine launcher"],
        ),
        (["--tpu"], ["--tpu", "torch_xla, which is not installed here", "pip install torch_xla"]),
        (
            ["--mixed_precision", "fp8", "--fp8_backend", "te"],
            ["fp8_backend=TE", "transformer-engine", "--fp8_backend AO"],
        ),
        (["--use_megatron_lm"], ["--use_megatron_lm", "needs NVIDIA GPUs and the megatron-core package"]),
        (["--aws_access_key_id", "k"], ["--aws_access_key_id", "SageMaker"]),
    ],
)
def test_dry_run_refuses_unavailable_features(tmp_path: Path, flags: list[str], needles: list[str]) -> None:
    # One subprocess per feature family: the exit status and the message a user sees.
    result = run_cli("launch", "--cpu", *flags, "--dry_run", "train.py", home=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "accelerate launch: error:" in result.stderr
    for needle in needles:
        assert needle in result.stderr
    assert "nothing was started" not in result.stdout


def test_upstreams_module_level_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from accelerate.commands import config as config_command
    from accelerate.commands.launch import launch_command, launch_command_parser

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert config_command.default_config_file == str(tmp_path / "accelerate" / "default_config.yaml")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        config_command.load_config_from_file(None)
    (tmp_path / "cfg.yaml").write_text("num_processes: 3\nuse_cpu: true\n")
    assert config_command.load_config_from_file(str(tmp_path / "cfg.yaml")).num_processes == 3
    args = launch_command_parser().parse_args(["--cpu", "--use_megatron_lm", "--dry_run", "train.py"])
    with pytest.raises(subprocess.CalledProcessError):
        launch_command(args)
