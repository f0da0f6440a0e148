"""`accelerate test` runs the bundled self-check through the launcher and gives a verdict."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.commands.helpers import Script, accelerate_cmd, cli_env, reserved_port
from tests.helpers.side_by_side import SideBySide, selected

# Looked up, not imported: importing deepspeed here would set variables in this test process.
_HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


def _plain(processes: int, precision: str) -> Callable[[int], str]:
    def config(port: int) -> str:
        return (
            f"compute_environment: LOCAL_MACHINE\ndistributed_type: {'MULTI_CPU' if processes > 1 else 'NO'}\n"
            f"num_processes: {processes}\nuse_cpu: true\nmixed_precision: '{precision}'\n"
            + (f"main_process_port: {port}\n" if processes > 1 else "")
        )

    return config


def _fsdp_from_the_questionnaire(port: int) -> str:
    data = Script(
        "FSDP", "", "", "", "", "",  # FSDP on 2 CPU processes, no debug checks, no dynamo
        "", "", "NO_WRAP", "", "n", "",  # FSDP2, reshard, one unit, sharded saves, plain loading, no checkpointing
        "", "",  # no parallelism config, fp32
    ).ask()  # fmt: skip
    return yaml.safe_dump({**data, "main_process_port": port})


def _one_process_deepspeed_bf16(port: int) -> str:
    data = Script(
        "DEEPSPEED", "CPU processes", "", "1", "", "",  # 1 machine, 1 process, no debug checks, no dynamo
        "", "", "", "", "",  # inline options: ZeRO-2, no optimizer offload, 1 accumulation step, no clipping
        "bf16",
    ).ask()  # fmt: skip
    return yaml.safe_dump(data)


def _tp_x_fsdp(port: int) -> str:
    return yaml.safe_dump({
        "compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_CPU", "num_processes": 4,
        "use_cpu": True, "mixed_precision": "no", "main_process_port": port,
        "parallelism_config": {"parallelism_config_dp_shard_size": 2, "parallelism_config_tp_size": 2},
    })  # fmt: skip


def _pipeline(port: int) -> str:
    return yaml.safe_dump({
        "compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_CPU", "num_processes": 2,
        "use_cpu": True, "mixed_precision": "no", "main_process_port": port,
        "parallelism_config": {"parallelism_config_pp_size": 2, "parallelism_config_pp_schedule": "GPipe"},
    })  # fmt: skip


# Each test runs `accelerate test` under its own config (written by these, given the run's port). The
# runs start ahead of their tests, two at a time (tests/helpers/side_by_side.py): much of each run is
# interpreters starting, while a core idles.
_CONFIGS: dict[str, Callable[[int], str]] = {
    "1-bf16": _plain(1, "bf16"),
    "2-no": _plain(2, "no"),
    "fsdp": _fsdp_from_the_questionnaire,
    "deepspeed": _one_process_deepspeed_bf16,
    "tp_fsdp": _tp_x_fsdp,
    "pp": _pipeline,
}
_CASES_OF_TEST = {
    "test_self_check_passes": ["1-bf16", "2-no"],
    "test_self_check_under_the_fsdp_config_the_questionnaire_writes": ["fsdp"],
    "test_self_check_under_a_one_process_deepspeed_config_with_bf16": ["deepspeed"] if _HAS_DEEPSPEED else [],
    "test_self_check_under_a_tensor_parallel_x_fsdp_config": ["tp_fsdp"],
    "test_self_check_under_a_pipeline_config": ["pp"],
}
_AT_ONCE = 2


def _self_check(config_of: Callable[[int], str]) -> Callable[[Path, int], tuple[list[str], dict[str, str]]]:
    def command(folder: Path, port: int) -> tuple[list[str], dict[str, str]]:
        config = folder / "config.yaml"
        config.write_text(config_of(port))
        return accelerate_cmd("test", "--config_file", str(config)), cli_env(folder)

    return command


@pytest.fixture(scope="module")
def self_checks(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SideBySide]:
    runs = SideBySide(
        tmp_path_factory.mktemp("self_checks"), at_once=_AT_ONCE, timeout=240, reserve_port=reserved_port
    )
    wanted = selected(request, _CASES_OF_TEST)
    for name, config_of in _CONFIGS.items():  # in the tests' order
        if name in wanted:
            runs.add(name, _self_check(config_of))
    try:
        yield runs
    finally:
        runs.close()


def _config(self_checks: SideBySide, name: str) -> dict[str, Any]:
    """The config case ``name`` ran under, as `accelerate test` read it."""
    data: dict[str, Any] = yaml.safe_load((self_checks.folder(name) / "config.yaml").read_text())
    return data


# The 2-process run compares training with a 1-process reference (full precision only); the
# 1-process run covers mixed precision.
@pytest.mark.parametrize(("processes", "precision"), [(1, "bf16"), (2, "no")])
def test_self_check_passes(self_checks: SideBySide, processes: int, precision: str) -> None:
    result = self_checks.result(f"{processes}-{precision}")
    out = result.stdout
    # Every check reports, whatever happened to the ones before it.
    for name in ("processes and ranks", "device", "collectives", "dataloader sharding", "training matches",
                 "mixed precision", "save_state / load_state"):  # fmt: skip
        assert name in out, out + result.stderr
    assert f"{processes} process(es)" in out
    assert "VERDICT: all checks passed." in out, out + result.stderr
    if precision != "no":
        assert "autocast computes in torch.bfloat16" in out  # the check ran, not skipped
    assert result.returncode == 0


def test_self_check_under_the_fsdp_config_the_questionnaire_writes(self_checks: SideBySide) -> None:
    result = self_checks.result("fsdp")
    data = _config(self_checks, "fsdp")
    assert data["distributed_type"] == "FSDP" and data["fsdp_config"]["fsdp_version"] == 2
    out = result.stdout
    assert "2 process(es), distributed_type=FSDP" in out, out + result.stderr
    # Training compares the gathered parameters; the row says they were sharded while training.
    assert "match the 1-process reference, parameters sharded over 2 processes" in out, out + result.stderr
    assert "VERDICT: all checks passed." in out and result.returncode == 0, out + result.stderr


@pytest.mark.skipif(not _HAS_DEEPSPEED, reason="needs deepspeed (make test installs it)")
def test_self_check_under_a_one_process_deepspeed_config_with_bf16(self_checks: SideBySide) -> None:
    # One process keeps it cheap; it covers a lone DeepSpeed process (no torchrun, so no LOCAL_RANK) and
    # the mixed-precision check preparing its model with an optimizer, as DeepSpeed requires.
    result = self_checks.result("deepspeed")
    data = _config(self_checks, "deepspeed")
    assert data["deepspeed_config"]["zero_stage"] == 2 and data["num_processes"] == 1
    out = result.stdout
    assert "1 process(es), distributed_type=DEEPSPEED, mixed_precision=bf16" in out, out + result.stderr
    assert "autocast computes in torch.bfloat16" in out, out + result.stderr
    assert "VERDICT: all checks passed." in out and result.returncode == 0, out + result.stderr


def test_self_check_under_a_tensor_parallel_x_fsdp_config(self_checks: SideBySide) -> None:
    # dp_shard=2 x tp=2 is the smallest mesh with both TP and FSDP (4 CPU processes, ~30 s on 2 cores):
    # the self-check splits its models on the tp sub-mesh before prepare(), as a user's script must.
    result = self_checks.result("tp_fsdp")
    out = result.stdout
    assert "4 process(es), distributed_type=FSDP, mesh dp_shard=2 x tp=2" in out, out + result.stderr
    assert "the 2 ranks of each tensor-parallel group read the same batches" in out, out + result.stderr
    assert "match the 1-process reference, tensor-parallel model on the mesh dp_shard=2 x tp=2" in out
    assert "VERDICT: all checks passed." in out and result.returncode == 0, out + result.stderr


def test_self_check_under_a_pipeline_config(self_checks: SideBySide) -> None:
    # pp=2 on 2 CPU processes: the training check runs a pipeline (loss inside the schedule) instead of failing.
    result = self_checks.result("pp")
    out = result.stdout
    assert "GPipe pipeline of 3 blocks over pp=2 match the 1-process reference" in out, out + result.stderr
    assert "save_state/load_state round trip of the pipeline's stages" in out, out + result.stderr
    assert "VERDICT: all checks passed." in out and result.returncode == 0, out + result.stderr
