"""`accelerate tpu-config`: the gcloud command built from flags and the config file (--debug prints it)."""

from __future__ import annotations

import shlex
from pathlib import Path

from tests.commands.helpers import run_cli


def _debug_command(result_stdout: str) -> list[str]:
    line = result_stdout.strip().splitlines()[-1]
    assert line.startswith("Running ")
    return shlex.split(line.removeprefix("Running "))


def test_debug_prints_the_gcloud_command_from_flags(tmp_path: Path) -> None:
    result = run_cli("tpu-config", "--tpu_name", "pod-1", "--tpu_zone", "us-central2-b", "--command", "echo", "hi",
                     "--command", "ls /tmp", "--debug", home=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _debug_command(result.stdout) == [
        "gcloud", "compute", "tpus", "tpu-vm", "ssh", "pod-1", "--zone", "us-central2-b",
        "--command", "cd /usr/share; echo hi; ls /tmp", "--worker", "all",
    ]  # fmt: skip


def test_config_file_supplies_what_the_flags_do_not(tmp_path: Path) -> None:
    commands = tmp_path / "setup.sh"
    commands.write_text("pip install datasets\n\necho done\n")
    config = tmp_path / "tpu.yaml"
    config.write_text(
        f"compute_environment: LOCAL_MACHINE\ndistributed_type: XLA\ntpu_name: from-file\ntpu_zone: europe-west4-a\n"
        f"command_file: {commands}\n"
    )
    result = run_cli("tpu-config", "--config_file", str(config), "--tpu_name", "from-flag", "--use_alpha",
                     "--install_accelerate", "--accelerate_version", "1.2.0", "--debug", home=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    command = _debug_command(result.stdout)
    assert (
        command[:3] == ["gcloud", "alpha", "compute"]
        and "from-flag" in command
        and "europe-west4-a" in command
    )
    assert command[command.index("--command") + 1] == (
        "cd /usr/share; pip install accelerate==1.2.0; pip install datasets; echo done"
    )


def test_missing_pod_or_commands_are_named(tmp_path: Path) -> None:
    result = run_cli("tpu-config", "--tpu_name", "pod", "--command", "ls", "--debug", home=tmp_path)
    assert result.returncode == 2 and "--tpu_zone not given" in result.stderr
    result = run_cli("tpu-config", "--tpu_name", "pod", "--tpu_zone", "z", "--debug", home=tmp_path)
    assert result.returncode == 2 and "no command to run" in result.stderr


def test_without_gcloud_the_command_is_shown(tmp_path: Path) -> None:
    result = run_cli(
        "tpu-config", "--tpu_name", "p", "--tpu_zone", "z", "--command", "ls", home=tmp_path, PATH=""
    )
    assert result.returncode == 127 and "gcloud is not installed" in result.stderr
    assert "tpu-vm ssh p --zone z" in result.stderr
