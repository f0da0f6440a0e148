"""The console scripts of [project.scripts] (accelerate, accelerate-launch, ...) and the TPU/FSDP2 commands."""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.commands.helpers import REPO, cli_env, run_cli

# [project.scripts] of pyproject.toml, read by pattern (tomllib is Python 3.11+, and 3.10 is supported).
_SECTION = (REPO / "pyproject.toml").read_text().split("[project.scripts]", 1)[1].split("\n[", 1)[0]
SCRIPTS = dict(re.findall(r'^([\w-]+) = "([\w.:]+)"$', _SECTION, flags=re.M))
FIXTURES = REPO.parent / "shared" / "fixtures" / "upstream-configs"


def test_upstreams_console_scripts_are_declared() -> None:
    assert set(SCRIPTS) == {"accelerate", "accelerate-config", "accelerate-estimate-memory", "accelerate-launch",
                            "accelerate-merge-weights"}  # fmt: skip


@pytest.mark.parametrize(
    ("script", "usage"),
    [
        ("accelerate-launch", "accelerate launch"),
        ("accelerate-config", "accelerate config"),
        ("accelerate-estimate-memory", "accelerate estimate-memory"),
        ("accelerate-merge-weights", "accelerate merge-weights"),
    ],
)
def test_each_console_script_is_its_subcommand(tmp_path: Path, script: str, usage: str) -> None:
    module, function = SCRIPTS[script].split(":")
    assert callable(getattr(importlib.import_module(module), function))
    # Run the entry point as the installed wrapper would (sys.argv[0] = the script's name).
    code = f"import sys; sys.argv[0] = {script!r}; from {module} import {function}; sys.exit({function}())"
    installed = shutil.which(script)
    cmd = [installed, "--help"] if installed else [sys.executable, "-c", code, "--help"]
    result = subprocess.run(cmd, env=cli_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"usage: {usage}" in result.stdout or usage in result.stdout


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="upstream config fixtures not found")
def test_to_fsdp2_converts_upstreams_fsdp_file(tmp_path: Path) -> None:
    out = tmp_path / "fsdp2.yaml"
    result = run_cli("to-fsdp2", "--config_file", str(FIXTURES / "latest_fsdp.yaml"), "--output_file", str(out),
                     home=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    fsdp = yaml.safe_load(out.read_text())["fsdp_config"]
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_reshard_after_forward"] is True
    assert not {"fsdp_sharding_strategy", "fsdp_backward_prefetch", "fsdp_use_orig_params"} & set(fsdp)
    assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == "BertLayer"
    again = run_cli("to-fsdp2", "--config_file", str(FIXTURES / "latest_fsdp.yaml"), "--output_file", str(out),
                    home=tmp_path)  # fmt: skip
    assert again.returncode == 2 and "--overwrite" in again.stderr
