"""The launcher's expert dimension: --parallelism_config_ep_size and the YAML key -> the children's
variable -> ParallelismConfig; --dry_run prints each process's ep coordinate; bad sizes refused."""

from __future__ import annotations

import pytest

from accelerate.config.config_file import LaunchConfig
from accelerate.config.env import read_launch_env
from accelerate.launch.plan import LaunchError
from accelerate.state.parallelism_env import parallelism_config_from_env
from tests.launch.test_parallelism import ON, cpu_plan
from tests.launch.test_plan import plan


def test_ep_flag_reaches_the_child_config() -> None:
    env = cpu_plan(4, **ON, parallelism_config_dp_shard_size=4, parallelism_config_ep_size=2).child_env
    assert env["PARALLELISM_CONFIG_EP_SIZE"] == "2"
    config = parallelism_config_from_env(read_launch_env(env))
    assert config is not None and (config.ep_size, config.dp_shard_size) == (2, 4)
    # Without experts the children see upstream's variables only.
    assert "PARALLELISM_CONFIG_EP_SIZE" not in cpu_plan(2, **ON, parallelism_config_dp_shard_size=2).child_env


def test_the_yaml_key_sets_ep() -> None:
    config = LaunchConfig(use_cpu=True, num_processes=2, parallelism_config={
        "parallelism_config_dp_shard_size": 2, "parallelism_config_ep_size": 2})  # fmt: skip
    assert plan({}, config).child_env["PARALLELISM_CONFIG_EP_SIZE"] == "2"


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        ({"parallelism_config_dp_shard_size": 2, "parallelism_config_ep_size": 4}, r"ep_size must divide dp_shard_size"),
        ({"parallelism_config_dp_shard_size": 1, "parallelism_config_sp_size": 2, "parallelism_config_ep_size": 2},
         r"ep with sp is not supported yet"),
        ({"parallelism_config_dp_shard_size": 2, "parallelism_config_ep_size": 0}, r"at least 1"),
    ],
)  # fmt: skip
def test_bad_expert_settings_are_refused_before_anything_starts(flags: dict[str, object], match: str) -> None:
    with pytest.raises(LaunchError, match=match):
        cpu_plan(2, **ON, **flags)


def test_ep_composes_with_tp() -> None:
    flags = {
        "parallelism_config_dp_shard_size": 2,
        "parallelism_config_tp_size": 2,
        "parallelism_config_ep_size": 2,
    }
    env = cpu_plan(4, **ON, **flags).child_env
    assert (env["PARALLELISM_CONFIG_EP_SIZE"], env["PARALLELISM_CONFIG_TP_SIZE"]) == ("2", "2")


def test_dry_run_prints_the_ep_coordinate() -> None:
    text = cpu_plan(4, **ON, parallelism_config_dp_shard_size=4, parallelism_config_ep_size=2).describe()
    lines = text.splitlines()
    start = lines.index("Device mesh (ParallelismConfig, outermost dimension first):")
    assert "dp_shard=4" in lines[start + 1] and "(ep=2 within dp_shard)" in lines[start + 1]
    header = lines[start + 2].split()
    assert header[:4] == ["rank", "dp_replicate", "dp_shard", "ep"]
    eps = [int(lines[start + 3 + r].split()[3]) for r in range(4)]
    assert eps == [0, 1, 0, 1]
