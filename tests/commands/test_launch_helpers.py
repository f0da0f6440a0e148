"""Upstream's launch helpers (public path ``accelerate.utils.launch``), answered by our launch plan."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

from accelerate.commands.launch import launch_command_parser
from accelerate.commands.launch_helpers import (
    PrepareForLaunch,
    env_var_path_add,
    prepare_deepspeed_cmd_env,
    prepare_extend_env_parallelism_config,
    prepare_multi_gpu_env,
    prepare_sagemager_args_inputs,
    prepare_simple_launcher_cmd_env,
    prepare_tpu,
    setup_fp8_env,
)
from accelerate.utils.errors import NotAvailableYetError


def test_env_var_path_add(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_PATH", "/a::/b")
    assert env_var_path_add("SOME_PATH", "/c") == "/a:/b:/c"
    assert os.environ["SOME_PATH"] == "/a::/b"  # returned, not set
    monkeypatch.delenv("SOME_PATH")
    assert env_var_path_add("SOME_PATH", "/c") == "/c"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # No config file: defaults and flags only.
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    return tmp_path


def test_simple_launcher_cmd_env_is_the_launch_plan(home: Path) -> None:
    args = launch_command_parser().parse_args(["--cpu", "--mixed_precision", "bf16", "train.py", "--lr", "1"])
    cmd, env = prepare_simple_launcher_cmd_env(args)
    assert cmd[0] == sys.executable and "train.py" in cmd and cmd[-2:] == ["--lr", "1"]
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16" and env["ACCELERATE_USE_CPU"].lower() in {"1", "true"}


def test_multi_process_env_and_the_simple_launcher_refusing_it(home: Path) -> None:
    args = launch_command_parser().parse_args(["--cpu", "--num_processes", "2", "train.py"])
    env = prepare_multi_gpu_env(args)
    assert env["ACCELERATE_USE_CPU"].lower() in {"1", "true"}
    assert prepare_extend_env_parallelism_config(args, env) is env
    with pytest.raises(ValueError, match="use prepare_multi_gpu_env"):
        prepare_simple_launcher_cmd_env(args)
    # a DeepSpeed launch is planned like any other: torch.distributed.run with its settings in the environment
    ds_args = launch_command_parser().parse_args(
        ["--cpu", "--num_processes", "2", "--use_deepspeed", "--zero_stage", "3", "train.py"]
    )
    command, ds_env = prepare_deepspeed_cmd_env(ds_args)
    assert "torch.distributed.run" in command and ds_env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
    assert ds_env["ACCELERATE_USE_DEEPSPEED"] == "true" and ds_env["DS_ACCELERATOR"] == "cpu"


def test_unavailable_launch_targets_raise_the_one_error() -> None:
    for call in (
        lambda: prepare_tpu(argparse.Namespace(), {}, pod=True),
        lambda: prepare_sagemager_args_inputs(None, None),  # type: ignore[arg-type]
    ):
        with pytest.raises(NotAvailableYetError):
            call()


def test_setup_fp8_env_writes_upstreams_variables() -> None:
    args = argparse.Namespace(
        fp8_backend="ao", fp8_pad_inner_dim=True, fp8_margin=None, mixed_precision="fp8"
    )
    env = setup_fp8_env(args, {"KEEP": "1"})
    assert env == {"KEEP": "1", "ACCELERATE_FP8_BACKEND": "AO", "ACCELERATE_FP8_PAD_INNER_DIM": "True"}


def _rank_vars() -> tuple[str, str]:
    return os.environ["RANK"], os.environ["LOCAL_RANK"]


def test_prepare_for_launch_sets_rank_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPROC", "2")
    monkeypatch.setenv("NODE_RANK", "1")
    monkeypatch.setenv("RANK", "before")  # recorded, so the fixture restores the environment after
    monkeypatch.setenv("LOCAL_RANK", "before")
    assert PrepareForLaunch(_rank_vars, distributed_type="MULTI_CPU")(1) == ("3", "1")
    monkeypatch.setenv("RANK", "untouched")
    assert PrepareForLaunch(lambda x: x * 2)(0, 21) == 42  # "NO": nothing set, the function runs
    assert os.environ["RANK"] == "untouched"


def test_prepare_tpu_sets_torch_xla_bf16_switch() -> None:
    args = argparse.Namespace(mixed_precision="bf16", downcast_bf16=False)
    assert prepare_tpu(args, {}) == (args, {"XLA_USE_BF16": "1"})
    args.downcast_bf16 = True
    assert prepare_tpu(args, {"A": "1"})[1] == {"A": "1", "XLA_DOWNCAST_BF16": "1"}
    assert prepare_tpu(argparse.Namespace(mixed_precision="no"), {})[1] == {}


def test_extend_env_parallelism_config_writes_upstreams_variables() -> None:
    args = launch_command_parser().parse_args(
        ["--cpu", "--num_processes", "4", "--use_parallelism_config", "--parallelism_config_tp_size", "2",
         "--parallelism_config_dp_shard_size", "2", "train.py"]
    )  # fmt: skip
    env: dict[str, str] = {"KEEP": "1"}
    assert prepare_extend_env_parallelism_config(args, env) is env
    assert env["ACCELERATE_USE_PARALLELISM_CONFIG"] == "true" and env["KEEP"] == "1"
    assert (env["PARALLELISM_CONFIG_TP_SIZE"], env["PARALLELISM_CONFIG_DP_SHARD_SIZE"]) == ("2", "2")
    assert env["PARALLELISM_CONFIG_DP_REPLICATE_SIZE"] == env["PARALLELISM_CONFIG_CP_SIZE"] == "1"
