"""`accelerate test` runs the bundled self-check through the launcher and gives a verdict."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from tests.commands.helpers import Script, reserved_port, run_cli


# The 2-process run compares training with a 1-process reference (full precision only); the
# 1-process run covers mixed precision.
@pytest.mark.parametrize(("processes", "precision"), [(1, "bf16"), (2, "no")])
def test_self_check_passes(tmp_path: Path, processes: int, precision: str) -> None:
    config = tmp_path / "config.yaml"
    with reserved_port() as port:  # held until the run ends, so no other process can take it
        config.write_text(
            f"compute_environment: LOCAL_MACHINE\ndistributed_type: {'MULTI_CPU' if processes > 1 else 'NO'}\n"
            f"num_processes: {processes}\nuse_cpu: true\nmixed_precision: '{precision}'\n"
            + (f"main_process_port: {port}\n" if processes > 1 else "")
        )
        result = run_cli("test", "--config_file", str(config), home=tmp_path, timeout=240)
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


def test_self_check_under_the_fsdp_config_the_questionnaire_writes(tmp_path: Path) -> None:
    data = Script(
        "FSDP", "", "", "", "", "",  # FSDP on 2 CPU processes, no debug checks, no dynamo
        "", "", "NO_WRAP", "", "n", "",  # FSDP2, reshard, one unit, sharded saves, plain loading, no checkpointing
        "", "",  # no parallelism config, fp32
    ).ask()  # fmt: skip
    assert data["distributed_type"] == "FSDP" and data["fsdp_config"]["fsdp_version"] == 2
    config = tmp_path / "fsdp.yaml"
    with reserved_port() as port:
        config.write_text(yaml.safe_dump({**data, "main_process_port": port}))
        result = run_cli("test", "--config_file", str(config), home=tmp_path, timeout=240)
    out = result.stdout
    assert "2 process(es), distributed_type=FSDP" in out, out + result.stderr
    # Training compares the gathered parameters; the row says they were sharded while training.
    assert "match the 1-process reference, parameters sharded over 2 processes" in out, out + result.stderr
    assert "VERDICT: all checks passed." in out and result.returncode == 0, out + result.stderr


# Looked up, not imported: importing deepspeed here would set variables in this test process.
@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None, reason="needs deepspeed (make test installs it)"
)
def test_self_check_under_a_one_process_deepspeed_config_with_bf16(tmp_path: Path) -> None:
    # One process keeps it cheap; it covers a lone DeepSpeed process (no torchrun, so no LOCAL_RANK) and
    # the mixed-precision check preparing its model with an optimizer, as DeepSpeed requires.
    data = Script(
        "DEEPSPEED", "CPU processes", "", "1", "", "",  # 1 machine, 1 process, no debug checks, no dynamo
        "", "", "", "", "",  # inline options: ZeRO-2, no optimizer offload, 1 accumulation step, no clipping
        "bf16",
    ).ask()  # fmt: skip
    assert data["deepspeed_config"]["zero_stage"] == 2 and data["num_processes"] == 1
    config = tmp_path / "deepspeed.yaml"
    config.write_text(yaml.safe_dump(data))
    result = run_cli("test", "--config_file", str(config), home=tmp_path, timeout=240)
    out = result.stdout
    assert "1 process(es), distributed_type=DEEPSPEED, mixed_precision=bf16" in out, out + result.stderr
    assert "autocast computes in torch.bfloat16" in out, out + result.stderr
    assert "VERDICT: all checks passed." in out and result.returncode == 0, out + result.stderr


def test_self_check_under_a_tensor_parallel_x_fsdp_config(tmp_path: Path) -> None:
    # dp_shard=2 x tp=2 is the smallest mesh with both TP and FSDP (4 CPU processes, ~30 s on 2 cores):
    # the self-check splits its models on the tp sub-mesh before prepare(), as a user's script must.
    config = tmp_path / "tp_fsdp.yaml"
    with reserved_port() as port:
        config.write_text(yaml.safe_dump({
            "compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_CPU", "num_processes": 4,
            "use_cpu": True, "mixed_precision": "no", "main_process_port": port,
            "parallelism_config": {"parallelism_config_dp_shard_size": 2, "parallelism_config_tp_size": 2},
        }))  # fmt: skip
        result = run_cli("test", "--config_file", str(config), home=tmp_path, timeout=240)
    out = result.stdout
    assert "4 process(es), distributed_type=FSDP, mesh dp_shard=2 x tp=2" in out, out + result.stderr
    assert "the 2 ranks of each tensor-parallel group read the same batches" in out, out + result.stderr
    assert "match the 1-process reference, tensor-parallel model on the mesh dp_shard=2 x tp=2" in out
    assert "VERDICT: all checks passed." in out and result.returncode == 0, out + result.stderr


def test_self_check_under_a_pipeline_config(tmp_path: Path) -> None:
    # pp=2 on 2 CPU processes: the training check runs a pipeline (loss inside the schedule) instead of failing.
    config = tmp_path / "pp.yaml"
    with reserved_port() as port:
        config.write_text(yaml.safe_dump({
            "compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_CPU", "num_processes": 2,
            "use_cpu": True, "mixed_precision": "no", "main_process_port": port,
            "parallelism_config": {"parallelism_config_pp_size": 2, "parallelism_config_pp_schedule": "GPipe"},
        }))  # fmt: skip
        result = run_cli("test", "--config_file", str(config), home=tmp_path, timeout=240)
    out = result.stdout
    assert "GPipe pipeline of 3 blocks over pp=2 match the 1-process reference" in out, out + result.stderr
    assert "save_state/load_state round trip of the pipeline's stages" in out, out + result.stderr
    assert "VERDICT: all checks passed." in out and result.returncode == 0, out + result.stderr
