"""Every config key and sub-key is acted on or refused by name (config/keys.py), none silently ignored."""

from __future__ import annotations

import dataclasses
import re

import pytest

from accelerate.config.config_file import LaunchConfig, load_config_file, read_raw
from accelerate.config.keys import RULE_OF, SECTIONS, review_config
from accelerate.launch.checks import LaunchError
from accelerate.launch.plan import build_plan
from tests.config.test_config_file import FIXTURE_FILES, FIXTURES, needs_fixtures
from tests.helpers.reference import REFERENCE

needs_reference = pytest.mark.skipif(not REFERENCE.is_file(), reason=f"reference not found at {REFERENCE}")


def _reference_keys() -> set[str]:
    """Top-level keys of BaseConfig/ClusterConfig/SageMakerConfig and ``section.sub_key`` entries.

    The sub-key line is JSON that the reference cuts off after a few thousand characters, so its
    ``"section": {"key": {"launch_dest": ...}`` structure is read with a pattern, not a JSON parser.
    """
    text = REFERENCE.read_text(encoding="utf-8").split("## Config file keys written by upstream", 1)[1]
    keys: set[str] = set()
    for line in text.splitlines():
        if re.match(r"- \w+Config: \[", line):
            keys |= set(re.findall(r'"(\w+)"', line))
        elif line.startswith("- subkeys:"):
            for match in re.finditer(r'"(\w+_config)": \{(.*?)\}\}(?:, "|\}|$)', line):
                section = match.group(1)
                keys |= {
                    f"{section}.{sub}" for sub in re.findall(r'"(\w+)": \{"launch_dest"', match.group(2))
                }
    return keys


@needs_reference
def test_every_reference_key_has_a_rule() -> None:
    keys = _reference_keys()
    assert len(keys) > 60 and "deepspeed_config.zero_stage" in keys and "fp8_config.backend" in keys
    assert sorted(k for k in keys if k not in RULE_OF) == []


def _fixture_keys(name: str) -> list[str]:
    raw = read_raw(FIXTURES / name)
    out = []
    for key, value in raw.items():
        out.append(key)
        if key in SECTIONS and isinstance(value, dict):
            out += [f"{key}.{sub}" for sub in value]
    return out


@needs_fixtures
@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_every_fixture_key_has_a_rule(name: str) -> None:
    # fp16 / dynamo_backend are migrated to mixed_precision / dynamo_config before the table applies.
    keys = [k for k in _fixture_keys(name) if k not in ("fp16", "dynamo_backend")]
    assert sorted(k for k in keys if k not in RULE_OF) == []


def test_every_schema_field_has_a_rule() -> None:
    fields = {f.name for f in dataclasses.fields(LaunchConfig)}
    assert sorted(fields - set(RULE_OF)) == []


# How each upstream file fares with `accelerate launch`: runs (warnings named), or refused by name.
OUTCOMES: dict[str, tuple[str, list[str]]] = {
    "0_11_0.yaml": ("runs", []),
    "0_12_0.yaml": ("runs", []),
    # tpu_name / tpu_zone / command_file are `accelerate tpu-config`'s, read whatever distributed_type is.
    "latest.yaml": ("runs", []),
    "validate_launch_cmd.yaml": ("runs", ["deepspeed_config.deepspeed_config_file", "distributed_type is NO, not DEEPSPEED"]),
    "0_28_0_mpi.yaml": ("mpirun", []),
    "0_30_0_sagemaker.yaml": ("refused", ["AMAZON_SAGEMAKER"]),
    "0_34_0_fp8.yaml": ("refused", ["fp8"]),
    "latest_fsdp.yaml": ("runs", []),
}  # fmt: skip


@needs_fixtures
@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_each_upstream_file_runs_or_is_refused_by_name(name: str) -> None:
    outcome, needles = OUTCOMES[name]
    config = load_config_file(FIXTURES / name)

    def plan() -> object:
        return build_plan(script="train.py", config=config, environ={"PATH": ""}, gpu_count=lambda: 0,
                          check_port=None)  # fmt: skip

    if outcome == "refused":
        with pytest.raises(LaunchError) as caught:
            plan()
        text = str(caught.value)
    elif outcome == "mpirun":
        # The hostfile (a path on upstream's machine) is acted on: mpirun is looked for on PATH.
        with pytest.raises(LaunchError, match="no mpirun is on PATH"):
            plan()
        return
    else:
        text = "\n".join(plan().warnings)  # type: ignore[attr-defined]
    for needle in needles:
        assert needle in text


def test_sub_keys_of_a_section_in_use_are_refused_by_name() -> None:
    config = LaunchConfig(
        distributed_type="MEGATRON_LM",
        megatron_lm_config={"megatron_lm_tp_degree": 2, "megatron_lm_pp_degree": 2},
    )
    review = review_config(config, "cfg.yaml")
    assert any("megatron_lm_config.megatron_lm_tp_degree: 2" in e and "Megatron" in e for e in review.errors)
    assert any("megatron_lm_config.megatron_lm_pp_degree: 2" in e for e in review.errors)


def test_unknown_sub_keys_are_named() -> None:
    review = review_config(LaunchConfig(dynamo_config={"dynamo_backnd": "INDUCTOR"}), "cfg.yaml")
    assert review.errors and "dynamo_config.dynamo_backnd" in review.errors[0]
    review = review_config(LaunchConfig(fsdp_config={"fsdp_made_up": 1}), "cfg.yaml")
    assert not review.errors and "fsdp_config.fsdp_made_up" in review.warnings[0]


def test_off_values_pass_quietly_and_on_values_do_not() -> None:
    quiet = LaunchConfig(downcast_bf16="no", enable_cpu_affinity=False, main_training_function="main", tpu_env=[],
                         dynamo_config={"dynamo_use_regional_compilation": False})  # fmt: skip
    assert review_config(quiet, "cfg.yaml") == review_config(LaunchConfig(), "cfg.yaml")
    loud = LaunchConfig(enable_cpu_affinity=True)
    errors = review_config(loud, "cfg.yaml").errors
    assert any("enable_cpu_affinity: True" in e for e in errors)


def test_parallelism_config_keys_are_acted_on() -> None:
    # The section is --use_parallelism_config and its keys the flags (launch/parallelism.py checks them).
    config = LaunchConfig(
        parallelism_config={"parallelism_config_tp_size": 2, "parallelism_config_cp_size": 1}
    )
    assert review_config(config, "cfg.yaml") == review_config(LaunchConfig(), "cfg.yaml")
    review = review_config(LaunchConfig(parallelism_config={"parallelism_config_tp_sise": 2}), "cfg.yaml")
    assert review.errors and "parallelism_config.parallelism_config_tp_sise" in review.errors[0]


def test_dynamo_and_mpirun_sub_keys_are_acted_on() -> None:
    config = LaunchConfig(use_cpu=True, num_processes=2, dynamo_config={"dynamo_backend": "EAGER", "dynamo_mode": "default",
                          "dynamo_use_regional_compilation": True}, mpirun_config={"mpirun_ccl": 2})  # fmt: skip
    plan = build_plan(script="train.py", config=config, environ={}, gpu_count=lambda: 0, check_port=None)
    assert plan.value("dynamo_backend") == "eager" and plan.value("dynamo_mode") == "default"
    assert plan.child_env["ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"] == "true"
    assert plan.child_env["CCL_WORKER_COUNT"] == "2"
