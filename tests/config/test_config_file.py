"""The launch config file: round trips, upstream fixtures, migrations, errors, default location."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from accelerate.config.config_file import (
    ConfigFileError,
    LaunchConfig,
    UnknownConfigKeysError,
    config_from_dict,
    default_config_path,
    detect_schema_version,
    load_config_file,
    locate_config_file,
    read_raw,
    save_config_file,
)

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "upstream-configs"
# Outside CI a checkout without the shared folder skips these tests; under CI (CI=true) the tests run
# and fail on the missing files, and test_fixtures_are_present_under_ci says why.
UNDER_CI = os.environ.get("CI", "").lower() in ("true", "1")
needs_fixtures = pytest.mark.skipif(
    not FIXTURES.is_dir() and not UNDER_CI, reason=f"upstream config fixtures not found at {FIXTURES}"
)
FIXTURE_FILES = (
    sorted(p.name for p in FIXTURES.glob("*.yaml") if p.name != "invalid_keys.yaml")
    if FIXTURES.is_dir()
    else []
)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_round_trip(tmp_path: Path, suffix: str) -> None:
    config = LaunchConfig(
        compute_environment="LOCAL_MACHINE", distributed_type="MULTI_CPU", mixed_precision="bf16", use_cpu=True,
        num_processes=4, num_machines=2, machine_rank=1, main_process_ip="10.0.0.1", main_process_port=29555,
        dynamo_config={"dynamo_backend": "INDUCTOR"}, gpu_ids="0,1",
    )  # fmt: skip
    path = save_config_file(config, tmp_path / "sub" / f"cfg{suffix}")
    assert load_config_file(path) == config


def test_fixtures_are_present_under_ci() -> None:
    if not UNDER_CI:
        pytest.skip("only CI requires the shared fixtures")
    assert FIXTURES.is_dir(), f"CI=true but the upstream config fixtures are missing at {FIXTURES}"
    assert len(FIXTURE_FILES) >= 8, (
        f"expected upstream's 8 valid config files in {FIXTURES}, found {FIXTURE_FILES}"
    )


# What each upstream file must load as: the values it sets, after migration and YAML coercion.
EXPECTED: dict[str, dict[str, object]] = {
    "0_11_0.yaml": {"distributed_type": "NO", "mixed_precision": "no", "num_processes": 1, "num_machines": 1,
                    "machine_rank": 0, "main_process_port": None, "use_cpu": False, "deepspeed_config": {}},
    "0_12_0.yaml": {"distributed_type": "NO", "mixed_precision": "no", "downcast_bf16": "no", "num_processes": 1},
    "0_28_0_mpi.yaml": {"distributed_type": "MULTI_CPU", "num_processes": 16, "num_machines": 4,
                        "main_process_ip": "127.0.0.1", "main_process_port": 29500, "use_cpu": True,
                        "rdzv_backend": "static", "mpirun_config": {"mpirun_hostfile": "/home/user/hostfile"}},
    "0_30_0_sagemaker.yaml": {"compute_environment": "AMAZON_SAGEMAKER", "distributed_type": "NO",
                              "mixed_precision": "fp16", "ec2_instance_type": "MY_TYPE", "iam_role_name": "MY_ROLE"},
    "0_34_0_fp8.yaml": {"distributed_type": "MULTI_GPU", "mixed_precision": "fp8", "num_processes": 2,
                        "gpu_ids": "all", "enable_cpu_affinity": False},
    "latest.yaml": {"distributed_type": "NO", "gpu_ids": "all", "tpu_name": "test-tpu", "tpu_zone": "us-central1-a",
                    "commands": None, "command_file": "tests/test_samples/test_command_file.sh"},
    "latest_fsdp.yaml": {"distributed_type": "FSDP", "num_processes": 1, "debug": False},
    "validate_launch_cmd.yaml": {"distributed_type": "NO", "debug": True, "num_processes": 1,
                                 "fsdp_config": {"fsdp_sync_module_states": False}},
}  # fmt: skip


@needs_fixtures
@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_every_upstream_file_loads(name: str) -> None:
    config = load_config_file(FIXTURES / name)
    expected = EXPECTED.get(name)
    assert expected is not None, f"new fixture {name}: add the values it must load as to EXPECTED"
    assert {key: getattr(config, key) for key in expected} == expected
    # Loading then saving then loading again changes nothing (what `accelerate config update` relies on).
    assert config_from_dict(config.to_dict()) == config


@needs_fixtures
def test_fp16_of_old_files_becomes_mixed_precision(tmp_path: Path) -> None:
    # Files of accelerate < 0.7 carry `fp16: true` instead of mixed_precision; the 0.11 fixture with that
    # one line swapped stands in for them.
    text = (FIXTURES / "0_11_0.yaml").read_text().replace("mixed_precision: 'no'", "fp16: true")
    (tmp_path / "old.yaml").write_text(text)
    config = load_config_file(tmp_path / "old.yaml")
    assert config.mixed_precision == "fp16" and config.num_processes == 1 and config.distributed_type == "NO"


@needs_fixtures
def test_yaml_unquoted_no_is_not_a_boolean() -> None:
    # 0_30_0_sagemaker.yaml writes `distributed_type: NO` unquoted, which YAML reads as False.
    assert read_raw(FIXTURES / "0_30_0_sagemaker.yaml")["distributed_type"] is False
    assert load_config_file(FIXTURES / "0_30_0_sagemaker.yaml").distributed_type == "NO"


@needs_fixtures
def test_invalid_keys_are_named() -> None:
    with pytest.raises(UnknownConfigKeysError) as info:
        load_config_file(FIXTURES / "invalid_keys.yaml")
    assert info.value.keys == ["another_invalid_key", "invalid_key"]
    assert "'invalid_key'" in str(info.value) and "'another_invalid_key'" in str(info.value)


def test_old_schemas_migrate() -> None:
    v1 = {"fp16": True, "num_processes": 1}
    assert detect_schema_version(v1) == 1
    assert config_from_dict(v1).mixed_precision == "fp16"
    v2 = {"dynamo_backend": "INDUCTOR", "mixed_precision": "no"}
    assert detect_schema_version(v2) == 2
    assert config_from_dict(v2).dynamo_config == {"dynamo_backend": "INDUCTOR"}
    assert config_from_dict({"distributed_type": "TPU"}).distributed_type == "XLA"


@pytest.mark.parametrize(
    ("raw", "needle"),
    [({"num_processes": "two"}, "num_processes"), ({"mixed_precision": "fp32"}, "mixed_precision"),
     ({"use_cpu": "maybe"}, "use_cpu"), ({"fsdp_config": [1]}, "fsdp_config")],
)  # fmt: skip
def test_bad_values_name_the_key(raw: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigFileError, match=needle):
        config_from_dict(raw)


def test_unreadable_files(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("num_processes: [1\n")
    with pytest.raises(ConfigFileError, match="not valid YAML"):
        load_config_file(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigFileError, match="mapping"):
        load_config_file(tmp_path / "list.yaml")
    with pytest.raises(ConfigFileError, match="does not exist"):
        load_config_file(tmp_path / "missing.yaml")


def test_default_location_rules(tmp_path: Path) -> None:
    hf, xdg, home = tmp_path / "hf", tmp_path / "xdg", tmp_path / "home"
    both = {"HF_HOME": str(hf), "XDG_CACHE_HOME": str(xdg), "HOME": str(home)}
    assert default_config_path(both) == hf / "accelerate" / "default_config.yaml"
    no_hf = {"XDG_CACHE_HOME": str(xdg), "HOME": str(home)}
    assert default_config_path(no_hf) == xdg / "huggingface" / "accelerate" / "default_config.yaml"
    assert (
        default_config_path({"HOME": str(home)})
        == home / ".cache" / "huggingface" / "accelerate" / "default_config.yaml"
    )


def test_locate_order(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    default = save_config_file(LaunchConfig(num_processes=1), hf / "accelerate" / "default_config.yaml")
    named = save_config_file(LaunchConfig(num_processes=2), tmp_path / "named.yaml")
    from_env = save_config_file(LaunchConfig(num_processes=3), tmp_path / "env.yaml")
    env = {"HF_HOME": str(hf)}
    assert locate_config_file(None, env).path == default
    assert locate_config_file(None, env).source == "default"
    env_set = {**env, "ACCELERATE_CONFIG_FILE": str(from_env)}
    assert locate_config_file(None, env_set).path == from_env
    assert locate_config_file(str(named), env_set).path == named
    assert locate_config_file(None, {"HF_HOME": str(tmp_path / "empty")}).path is None
    with pytest.raises(ConfigFileError, match="ACCELERATE_CONFIG_FILE"):
        locate_config_file(None, {"ACCELERATE_CONFIG_FILE": str(tmp_path / "nope.yaml")})
    with pytest.raises(ConfigFileError, match="--config_file"):
        locate_config_file(str(tmp_path / "nope.yaml"), env)


@pytest.mark.parametrize("value", ["DATA_PARALLEL", "MODEL_PARALLEL", "NO"])
def test_a_sagemaker_files_distributed_type_is_sagemakers(tmp_path: Path, value: str) -> None:
    # As upstream: under compute_environment: AMAZON_SAGEMAKER, distributed_type is a SageMakerDistributedType.
    from accelerate.commands.config.config_args import SageMakerConfig, load_config_from_file
    from accelerate.utils.enums import SageMakerDistributedType

    path = tmp_path / "sagemaker.yaml"
    path.write_text(
        f"compute_environment: AMAZON_SAGEMAKER\ndistributed_type: {value}\nec2_instance_type: ml.p3.2xlarge\n"
        "iam_role_name: role\nmixed_precision: 'no'\nnum_machines: 1\nprofile: default\nregion: us-east-1\n"
        "use_cpu: false\ndebug: false\n"
    )
    config = load_config_from_file(str(path))
    assert isinstance(config, SageMakerConfig)
    assert config.distributed_type is SageMakerDistributedType(value)
    assert config.to_dict()["distributed_type"] == value


def test_data_parallel_is_not_a_local_distributed_type(tmp_path: Path) -> None:
    path = tmp_path / "local.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: DATA_PARALLEL\n")
    with pytest.raises(ValueError, match="distributed_type"):
        load_config_file(path)
