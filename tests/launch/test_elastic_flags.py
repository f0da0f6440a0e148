"""`--nnodes MIN:MAX` / `--num_machines MIN:MAX` / `--rdzv_endpoint`: what reaches torch.distributed.run, and bad input."""

from __future__ import annotations

from typing import Any

import pytest

from accelerate.launch.checks import LaunchError
from accelerate.launch.plan import LaunchPlan, build_plan
from accelerate.state.gradient import ELASTIC_MAX_PROCESSES_ENV


def plan(**flags: Any) -> LaunchPlan:
    flags = {"cpu": True, "num_processes": 2, **flags}
    return build_plan(script="train.py", flags=flags, environ={}, check_port=None)


def _arg(plan: LaunchPlan, name: str) -> str:
    args = plan.torchrun_args
    return args[args.index(name) + 1]


@pytest.mark.parametrize("flag", ["nnodes", "num_machines"])
def test_a_range_reaches_torchruns_agent_with_c10d(flag: str) -> None:
    launch = plan(**{flag: "1:2"}, rdzv_endpoint="127.0.0.1:29400", max_restarts=3)
    assert _arg(launch, "--nnodes") == "1:2"
    assert _arg(launch, "--nproc_per_node") == "1"  # num_processes is the total at the largest size
    assert _arg(launch, "--rdzv_backend") == "c10d"
    assert _arg(launch, "--rdzv_endpoint") == "127.0.0.1:29400"
    assert launch.settings["rdzv_backend"].source.startswith("default (c10d: an elastic --nnodes")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"num_machines": "1:2"}, {"nnodes": "flag --num_machines", "num_machines": "flag --num_machines"}),
        ({"nnodes": "1:2"}, {"nnodes": "flag --nnodes", "num_machines": "flag --nnodes"}),
        (
            {"nnodes": "1:2", "num_machines": "1:2"},
            {"nnodes": "flag --nnodes", "num_machines": "flag --num_machines"},
        ),
    ],
)
def test_the_dry_run_names_the_flag_that_was_typed(flags: dict[str, Any], expected: dict[str, str]) -> None:
    launch = plan(**flags, rdzv_endpoint="127.0.0.1:29400")
    assert {name: launch.settings[name].source for name in expected} == expected
    assert launch.settings["main_process_ip"].source == "flag --rdzv_endpoint"
    assert launch.settings["main_process_port"].source == "flag --rdzv_endpoint"
    report = launch.describe()
    assert all(f" {source}" in report for source in expected.values())
    assert launch.settings["nnodes"].flag == expected["nnodes"].removeprefix("flag ")


def test_an_endpoint_flag_that_has_no_effect_is_named_as_typed() -> None:
    with pytest.raises(LaunchError, match="--rdzv_endpoint has no effect here: num_processes=1"):
        plan(num_processes=1, rdzv_endpoint="127.0.0.1:29400")


def test_a_plain_count_is_not_elastic() -> None:
    launch = plan(nnodes=2, main_process_ip="10.0.0.1")
    assert _arg(launch, "--nnodes") == "2"
    assert launch.value("nnodes") is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"nnodes": "2:1"}, "--nnodes 2:1: MIN (2) is larger than MAX (1); write --nnodes 1:2"),
        ({"nnodes": "0:2"}, "--nnodes 0:2: the smallest group must have at least 1 machine"),
        ({"num_machines": "a:b"}, "--num_machines a:b: expected a number of machines N, or a range MIN:MAX"),
        ({"nnodes": "1:2", "num_machines": "1:3"}, "--nnodes 1:2 and --num_machines 1:3 disagree"),
        (
            {"nnodes": "1:2", "rdzv_backend": "static"},
            "rdzv_backend=static (from flag --rdzv_backend) forms the group once",
        ),
        ({"rdzv_endpoint": "nohost"}, "--rdzv_endpoint nohost: expected HOST:PORT"),
        (
            {"rdzv_endpoint": "a:1", "main_process_ip": "b"},
            "--rdzv_endpoint a:1 disagrees with --main_process_ip b",
        ),
    ],
)
def test_bad_input_names_the_flag_and_the_fix(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(LaunchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan(**flags)


def test_the_agent_environment_of_an_elastic_launch() -> None:
    from accelerate.launch.elastic import elastic_agent_env

    launch = plan(nnodes="1:2")
    env = elastic_agent_env(launch.settings, {})
    assert env == {ELASTIC_MAX_PROCESSES_ENV: "2", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    assert elastic_agent_env(plan().settings, {}) == {}


def test_the_membership_log_names_who_left_and_joined() -> None:
    from accelerate.launch.elastic import MembershipLog

    log = MembershipLog()
    assert log.formed(["a:1", "b:2"], 2) == []  # the first group is no change
    assert log.formed(["a:1"], 1) == ["node b:2 left; world size 2 -> 1"]
    assert log.formed(["a:1", "c:3"], 2) == ["node c:3 joined; world size 1 -> 2"]
    assert log.summary().splitlines()[1:] == [
        "  1. node b:2 left; world size 2 -> 1",
        "  2. node c:3 joined; world size 1 -> 2",
    ]
