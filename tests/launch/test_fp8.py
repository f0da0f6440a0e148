"""The launcher's fp8 settings (``--fp8_*`` flags, ``fp8_config``) become ``ACCELERATE_FP8_*`` for an fp8 run."""

from __future__ import annotations

from typing import Any

import pytest

from accelerate.config.config_file import LaunchConfig
from accelerate.config.env import read_launch_env
from accelerate.launch.checks import LaunchError
from accelerate.launch.plan import LaunchPlan, build_plan


def _plan(flags: dict[str, Any] | None = None, config: LaunchConfig | None = None) -> LaunchPlan:
    return build_plan(
        script="train.py", flags=flags, config=config, environ={}, gpu_count=lambda: 0, check_port=None
    )


def test_fp8_with_torchao_plans_and_writes_upstreams_variables() -> None:
    env = _plan(
        {"mixed_precision": "fp8", "fp8_backend": "ao", "fp8_enable_fsdp_float8_all_gather": "false"}
    ).child_env
    assert env["ACCELERATE_MIXED_PRECISION"] == "fp8" and env["ACCELERATE_FP8_BACKEND"] == "AO"
    assert env["ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER"] == "false"
    launched = read_launch_env(env)  # what the child reads back
    assert (launched.fp8_backend, launched.fp8_enable_fsdp_float8_all_gather) == ("AO", False)


def test_config_file_section_feeds_the_same_variables() -> None:
    config = LaunchConfig(mixed_precision="fp8", fp8_config={"backend": "AO", "pad_inner_dim": True})
    env = _plan(config=config).child_env
    assert env["ACCELERATE_FP8_BACKEND"] == "AO" and env["ACCELERATE_FP8_PAD_INNER_DIM"] == "true"
    # Without fp8 the section is not used: nothing reaches the children.
    other = _plan({"mixed_precision": "bf16"}, config).child_env
    assert not any(name.startswith("ACCELERATE_FP8_") for name in other)


def test_fp8_flags_without_fp8_and_missing_gpu_libraries_are_named() -> None:
    with pytest.raises(LaunchError, match="--fp8_backend configures fp8 training, but mixed_precision is no"):
        _plan({"fp8_backend": "ao"})
    with pytest.raises(LaunchError, match="must be one of AO, TE or MSAMP"):
        _plan({"mixed_precision": "fp8", "fp8_backend": "xla"})
    with pytest.raises(LaunchError, match="fp8_backend=MSAMP .*msamp.*--fp8_backend AO"):
        _plan({"mixed_precision": "fp8", "fp8_backend": "msamp"})
