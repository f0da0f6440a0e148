"""The launcher's pipeline dimension: --parallelism_config_pp_size / _pp_schedule and the YAML keys ->
the children's variables -> ParallelismConfig; --dry_run lists which ranks hold which stage."""

from __future__ import annotations

import pytest

from accelerate.config.config_file import LaunchConfig
from accelerate.config.env import read_launch_env
from accelerate.launch.plan import LaunchError
from accelerate.state.parallelism_env import parallelism_config_from_env
from tests.launch.test_parallelism import ON, cpu_plan
from tests.launch.test_plan import plan


def test_pp_flags_reach_the_child_config() -> None:
    p = cpu_plan(4, **ON, parallelism_config_pp_size=2, parallelism_config_pp_schedule="GPipe",
                 parallelism_config_dp_replicate_size=2)  # fmt: skip
    env = p.child_env
    assert env["PARALLELISM_CONFIG_PP_SIZE"] == "2" and env["PARALLELISM_CONFIG_PP_SCHEDULE"] == "GPipe"
    config = parallelism_config_from_env(read_launch_env(env))
    assert config is not None and (config.pp_size, config.pp_schedule, config.dp_replicate_size) == (
        2,
        "GPipe",
        2,
    )
    # Without a pipeline the children see upstream's variables only.
    assert "PARALLELISM_CONFIG_PP_SIZE" not in cpu_plan(2, **ON, parallelism_config_tp_size=2).child_env


def test_the_yaml_keys_turn_the_pipeline_on() -> None:
    config = LaunchConfig(use_cpu=True, num_processes=2, parallelism_config={
        "parallelism_config_pp_size": 2, "parallelism_config_pp_schedule": "Interleaved1F1B"})  # fmt: skip
    env = plan({}, config).child_env
    assert (
        env["PARALLELISM_CONFIG_PP_SIZE"] == "2"
        and env["PARALLELISM_CONFIG_PP_SCHEDULE"] == "Interleaved1F1B"
    )


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (
            {"parallelism_config_pp_size": 2, "use_deepspeed": True},
            r"parallelism_config_pp_size=2 .* with DeepSpeed",
        ),
        ({"parallelism_config_pp_size": 3}, r"multiply to 3 processes"),
        ({"parallelism_config_pp_size": 2, "parallelism_config_pp_schedule": "ZB"}, r"must be one of: GPipe"),
    ],
)
def test_bad_pipeline_settings_are_refused_before_anything_starts(
    flags: dict[str, object], match: str
) -> None:
    with pytest.raises(LaunchError, match=match):
        cpu_plan(2, **ON, **flags)


def test_dry_run_prints_which_ranks_hold_which_stage() -> None:
    text = cpu_plan(4, **ON, parallelism_config_pp_size=2, parallelism_config_dp_replicate_size=2).describe()
    lines = text.splitlines()
    start = lines.index("Device mesh (ParallelismConfig, outermost dimension first):")
    assert "dp_replicate=2  dp_shard=1  pp=2" in lines[start + 1]
    assert lines[start + 2].split()[:4] == ["rank", "dp_replicate", "dp_shard", "pp"]
    assert "Pipeline stages (1F1B, 2 stages; the model is cut at the first batch):" in lines
    assert "  pp 0: stage 0 on ranks 0, 2" in lines and "  pp 1: stage 1 on ranks 1, 3" in lines
    interleaved = cpu_plan(
        2, **ON, parallelism_config_pp_size=2, parallelism_config_pp_schedule="Interleaved1F1B"
    )
    assert "  pp 1: stages 1, 3 on ranks 1" in interleaved.describe().splitlines()
