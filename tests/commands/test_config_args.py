"""Upstream's ``accelerate.commands.config`` package layout: config_args (ClusterConfig, SageMakerConfig,
default locations, load_config_from_file), cluster, sagemaker, default, update, config, config_utils."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.commands.helpers import Script


def test_upstreams_submodules_import_and_share_our_names() -> None:
    from accelerate.commands import config as package
    from accelerate.commands.config import config_args, default, update
    from accelerate.utils import write_basic_config

    for name in ("cluster", "sagemaker", "config", "config_utils"):
        importlib.import_module(f"accelerate.commands.config.{name}")
    assert default.write_basic_config is write_basic_config is package.write_basic_config
    assert update.update_config.__module__ == "accelerate.commands.config.update"
    assert package.ask_questions and package.run_default and package.add_parser  # still importable here
    assert {"BaseConfig", "ClusterConfig", "SageMakerConfig", "load_config_from_file"} <= set(
        dir(config_args)
    )


def test_default_locations_follow_hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate.commands.config import config_args

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert config_args.hf_cache_home == str(tmp_path)
    assert config_args.cache_dir == str(tmp_path / "accelerate")
    expected = str(tmp_path / "accelerate" / "default_config.yaml")
    assert config_args.default_config_file == config_args.default_yaml_config_file == expected
    assert config_args.default_json_config_file == expected  # upstream's "json" default keeps the .yaml name


def test_load_config_from_file_gives_a_cluster_config(tmp_path: Path) -> None:
    from accelerate.commands.config import load_config_from_file
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.utils import DistributedType

    path = tmp_path / "cfg.yaml"
    path.write_text("distributed_type: MULTI_GPU\nnum_processes: 4\nmixed_precision: bf16\nfsdp_config: {}\n")
    config = load_config_from_file(str(path))
    assert isinstance(config, ClusterConfig)
    assert config.distributed_type is DistributedType.MULTI_GPU and config.num_processes == 4
    assert config.mixed_precision == "bf16" and config.use_cpu is False and config.dynamo_config == {}
    data = config.to_dict()
    assert data["distributed_type"] == "MULTI_GPU" and data["compute_environment"] == "LOCAL_MACHINE"
    config.to_json_file(tmp_path / "out" / "cfg.json")
    assert ClusterConfig.from_json_file(str(tmp_path / "out" / "cfg.json")) == config
    config.to_yaml_file(tmp_path / "again.yaml")
    assert ClusterConfig.from_yaml_file(str(tmp_path / "again.yaml")) == config


def test_bad_files_are_value_errors(tmp_path: Path) -> None:
    from accelerate.commands.config.config_args import ClusterConfig, SageMakerConfig, load_config_from_file

    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("num_processes: 2\nnot_a_key: 1\n")
    with pytest.raises(ValueError, match="not_a_key"):
        load_config_from_file(str(unknown))
    sagemaker_keys = tmp_path / "local_with_sagemaker_keys.yaml"
    sagemaker_keys.write_text("ec2_instance_type: ml.p3.2xlarge\n")
    with pytest.raises(ValueError, match="ec2_instance_type"):
        ClusterConfig.from_yaml_file(str(sagemaker_keys))
    incomplete = tmp_path / "incomplete.yaml"
    incomplete.write_text("compute_environment: AMAZON_SAGEMAKER\n")
    with pytest.raises(ValueError, match="SageMakerConfig"):
        load_config_from_file(str(incomplete))
    with pytest.raises(FileNotFoundError):
        SageMakerConfig.from_yaml_file(str(tmp_path / "missing.yaml"))


def test_sagemaker_file_and_questionnaire(tmp_path: Path) -> None:
    from accelerate.commands.config.config_args import SageMakerConfig, load_config_from_file
    from accelerate.commands.config.sagemaker import get_sagemaker_input
    from accelerate.utils import ComputeEnvironment

    path = tmp_path / "sm.yaml"
    path.write_text(
        "compute_environment: AMAZON_SAGEMAKER\ndistributed_type: 'NO'\nec2_instance_type: ml.p3.2xlarge\n"
        "iam_role_name: role\nmixed_precision: fp16\n"
    )
    config = load_config_from_file(str(path))
    assert (
        isinstance(config, SageMakerConfig)
        and config.compute_environment is ComputeEnvironment.AMAZON_SAGEMAKER
    )
    assert (config.iam_role_name, config.region, config.num_machines) == ("role", "us-east-1", 1)
    asked = get_sagemaker_input(Script("my_role", "", "eu-west-1", "ml.g5.xlarge", "2", "bf16").prompter)
    assert (asked.iam_role_name, asked.region, asked.num_machines, asked.profile) == (
        "my_role",
        "eu-west-1",
        2,
        None,
    )
    assert asked.distributed_type.value == "DATA_PARALLEL" and asked.base_job_name == "accelerate-sagemaker-2"


def test_cluster_questionnaire_and_parsers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate.commands.config import config as config_module
    from accelerate.commands.config.cluster import get_cluster_input
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.config.default import default_command_parser
    from accelerate.commands.config.update import update_command_parser

    monkeypatch.setattr("accelerate.commands.config._gpu_count", lambda: 0)
    config = get_cluster_input(Script("", "", "", "").prompter)  # one CPU machine, every default
    assert isinstance(config, ClusterConfig) and config.num_processes == 1 and config.mixed_precision == "no"
    parser = config_module.config_command_parser()
    assert parser.parse_args(["--config_file", "x.yaml"]).config_file == "x.yaml"
    assert default_command_parser().parse_args(["--mixed_precision", "bf16"]).mixed_precision == "bf16"
    target = tmp_path / "written.yaml"
    args = default_command_parser().parse_args(["--config_file", str(target)])
    assert args.func(args) == 0 and ClusterConfig.from_yaml_file(str(target)).num_processes == 1
    assert update_command_parser().parse_args(["--config_file", "y.yaml"]).config_file == "y.yaml"


def test_config_utils_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate.commands.config import config_utils

    answers = iter(["", "7", "maybe", "yes"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    assert config_utils._ask_field("Port? ", int, default=29500) == 29500
    assert config_utils._ask_field("Port? ", int) == 7
    assert (
        config_utils._ask_field("Ok? ", config_utils._convert_yes_no_to_bool, error_message="yes/no") is True
    )
    assert "INDUCTOR" in config_utils.DYNAMO_BACKENDS
    assert config_utils._convert_mixed_precision(2) == "bf16"
