"""`accelerate launch --use_fsdp ...` and upstream's FSDP config template, on 2 CPU processes for real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.commands.helpers import REPO, reserved_port, run_cli

SCRIPT = Path(__file__).resolve().parent / "scripts" / "fsdp_train.py"
TEMPLATE = REPO.parent / "shared" / "fixtures" / "upstream-configs" / "latest_fsdp.yaml"


def _launch(*args: str, home: Path, cpu: bool = True) -> list[dict[str, Any]]:
    out = home / "results"
    out.mkdir()
    with reserved_port() as port:
        result = run_cli("launch", *(["--cpu"] if cpu else []), "--num_processes", "2", "--main_process_port", str(port), *args,
                         str(SCRIPT), str(out), home=home, timeout=180)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    for row in rows:
        assert row["type"] == "FSDP" and row["is_fsdp2"]
        assert 0.4 < row["fraction"] < 0.6  # each rank holds about half of the parameters
        assert row["last_loss"] < row["first_loss"]
    return rows


def test_launch_flags_configure_fsdp(tmp_path: Path) -> None:
    rows = _launch(
        "--use_fsdp", "--fsdp_version", "2", "--fsdp_reshard_after_forward", "false",
        "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP", "--fsdp_transformer_layer_cls_to_wrap", "BertLayer",
        "--fsdp_activation_checkpointing", "true", "--fsdp_state_dict_type", "FULL_STATE_DICT",
        home=tmp_path,
    )  # fmt: skip
    for row in rows:
        assert row["wrapped"] == ["BertLayer"] and row["state_dict_type"] == "FULL_STATE_DICT"
        assert (
            row["describe"]
            == "fsdp_version 2 -> FSDP2 fully_shard(reshard_after_forward=False) on mesh [dp_shard=2]"
        )


@pytest.mark.skipif(not TEMPLATE.is_file(), reason=f"upstream's FSDP config template not found at {TEMPLATE}")
def test_upstreams_fsdp_config_template_runs(tmp_path: Path) -> None:
    # FULL_SHARD with BertLayer blocks, sharded state dicts and rank-0 loading; --cpu/--num_processes override
    # its GPU settings, as on a CPU CI runner.
    rows = _launch("--config_file", str(TEMPLATE), home=tmp_path)
    for row in rows:
        assert row["wrapped"] == ["BertLayer"] and row["state_dict_type"] == "SHARDED_STATE_DICT"
        assert row["describe"].startswith("fsdp_version 1, sharding_strategy FULL_SHARD -> FSDP2")


@pytest.mark.multi_gpu
def test_fsdp_on_two_gpus_with_bf16_and_cpu_offload(tmp_path: Path) -> None:
    rows = _launch(
        "--use_fsdp", "--fsdp_version", "2", "--mixed_precision", "bf16", "--fsdp_offload_params", "true",
        "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP", "--fsdp_transformer_layer_cls_to_wrap", "BertLayer",
        home=tmp_path, cpu=False,
    )  # fmt: skip
    assert all("dp_shard=2" in row["describe"] for row in rows)


@pytest.mark.cuda
def test_cpu_offload_is_accepted_on_a_gpu() -> None:
    import torch
    from torch.distributed.fsdp import CPUOffloadPolicy

    from accelerate.backends.fsdp.strategy import FSDPStrategy
    from accelerate.utils import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, cpu_offload=True)
    strategy = FSDPStrategy(
        torch.device("cuda", 0), plugin, mixed_precision="bf16", num_processes=2, num_processes_per_node=2
    )
    assert isinstance(strategy.plugin.cpu_offload, CPUOffloadPolicy)
    assert strategy.plugin.mixed_precision_policy.param_dtype == torch.bfloat16
    # The strategy set the policies on its own copy: the caller's plugin is as they built it.
    assert plugin.cpu_offload is True and plugin.mixed_precision_policy is None


def _peak(efficient: bool, home: Path) -> list[dict[str, Any]]:
    out = home / f"peak-{efficient}"
    out.mkdir()
    script = SCRIPT.parent / "fsdp_load_peak.py"
    with reserved_port() as port:
        result = run_cli("launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port),
                         str(script), str(out), str(efficient).lower(), home=home, timeout=180)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def test_cpu_ram_efficient_loading_keeps_the_other_ranks_below_one_model_copy(tmp_path: Path) -> None:
    # Measured in fresh processes (the peak resident size is a high-water mark). Without it every rank
    # builds the whole model and then its shards; with it rank 1 only ever holds its half (plus one
    # tensor in flight and a fixed ~40 MB of first-use overhead), and rank 0 alone holds a full copy.
    plain, efficient = _peak(False, tmp_path), _peak(True, tmp_path)
    size = plain[0]["model_mb"]
    assert all(rank["gained_mb"] > size for rank in plain), plain
    assert efficient[1]["gained_mb"] < min(0.5 * size + 100, 0.8 * size), efficient
    assert efficient[0]["gained_mb"] > size, efficient  # the one real copy
