"""`accelerate config` for FSDP, DeepSpeed and TPU / XLA: scripted answers through the plain prompter,
the file it writes (upstream's keys), and `accelerate launch --dry_run` on that file."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from accelerate.commands.accelerate_cli import main
from accelerate.commands.config import run_questionnaire
from tests.commands.helpers import Script

COMMON = {
    "compute_environment": "LOCAL_MACHINE", "debug": False, "downcast_bf16": "no", "enable_cpu_affinity": False,
    "machine_rank": 0, "main_training_function": "main", "num_machines": 1, "rdzv_backend": "static",
    "same_network": True,
}  # fmt: skip


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    for name in ("ACCELERATE_CONFIG_FILE", "ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_CPU"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _dry_run(config: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["launch", "--dry_run", "--config_file", str(config), "train.py"]) == 0, (
        capsys.readouterr().err
    )
    return capsys.readouterr().out


def test_fsdp2_on_cpu_processes_writes_upstreams_keys_and_launches(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = Script(
        "4",  # FSDP
        "",  # where: CPU processes (the default without a GPU)
        "", "",  # 1 machine, 2 processes
        "", "",  # no debug checks, no dynamo
        "",  # fsdp_version 2
        "",  # reshard after forward: yes
        "1", "Block,Embedding",  # TRANSFORMER_BASED_WRAP with two class names
        "",  # SHARDED_STATE_DICT
        "n",  # no cpu_ram_efficient_loading
        "y",  # activation checkpointing
        "",  # no parallelism config
        "bf16",
    )  # fmt: skip
    target = home / "fsdp.yaml"
    assert run_questionnaire(argparse.Namespace(config_file=str(target)), prompter=script.prompter) == 0
    assert "Offload" not in script.screen.getvalue()  # nothing to offload to on CPU processes
    assert yaml.safe_load(target.read_text()) == {
        **COMMON, "distributed_type": "FSDP", "use_cpu": True, "num_processes": 2, "mixed_precision": "bf16",
        "fsdp_config": {
            "fsdp_version": 2, "fsdp_reshard_after_forward": True, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_transformer_layer_cls_to_wrap": "Block,Embedding", "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": False, "fsdp_activation_checkpointing": True,
        },
    }  # fmt: skip
    out = _dry_run(target, capsys)
    for needle in ("ACCELERATE_USE_FSDP=true", "FSDP_VERSION=2", "FSDP_RESHARD_AFTER_FORWARD=true",
                   "FSDP_TRANSFORMER_CLS_TO_WRAP=Block,Embedding", "FSDP_ACTIVATION_CHECKPOINTING=true",
                   "ACCELERATE_USE_CPU=true", "--nproc_per_node 2", "fully_shard(reshard_after_forward=True)"):  # fmt: skip
        assert needle in out, needle


def test_fsdp1_on_gpus_asks_the_fsdp1_settings(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = Script(
        "FSDP", "",  # FSDP on GPUs (the default with GPUs)
        "", "", "", "", "",  # 1 machine, 2 processes, all GPUs, no debug, no dynamo
        "1",  # fsdp_version 1
        "SHARD_GRAD_OP", "y",  # strategy, offload to CPU (asked on GPUs)
        "size_based_wrap", "2000",  # min_num_params
        "",  # BACKWARD_PRE
        "2",  # FULL_STATE_DICT
        "n", "y",  # no efficient loading, then sync_module_states is asked
        "", "", "",  # no activation checkpointing, no parallelism config, mixed precision no
    ).ask(gpu_count=2)  # fmt: skip
    assert data["distributed_type"] == "FSDP" and data["use_cpu"] is False and data["gpu_ids"] == "all"
    assert data["fsdp_config"] == {
        "fsdp_version": 1, "fsdp_sharding_strategy": "SHARD_GRAD_OP", "fsdp_offload_params": True,
        "fsdp_auto_wrap_policy": "SIZE_BASED_WRAP", "fsdp_min_num_params": 2000, "fsdp_backward_prefetch": "BACKWARD_PRE",
        "fsdp_state_dict_type": "FULL_STATE_DICT", "fsdp_cpu_ram_efficient_loading": False,
        "fsdp_sync_module_states": True, "fsdp_activation_checkpointing": False,
    }  # fmt: skip
    # The file loads and is turned into the launcher's FSDP settings (checked without GPUs here).
    from accelerate.backends.fsdp.launch import resolve_fsdp
    from accelerate.config.config_file import config_from_dict, save_config_file

    path = save_config_file(config_from_dict(data), home / "fsdp1.yaml")
    assert main(["launch", "--dry_run", "--cpu", "--config_file", str(path), "train.py"]) == 0
    out = capsys.readouterr().out
    assert "FSDP_SHARDING_STRATEGY=SHARD_GRAD_OP" in out and "FSDP_MIN_NUM_PARAMS=2000" in out
    assert "reshard_after_forward=False" in out  # what SHARD_GRAD_OP became on FSDP2
    assert resolve_fsdp({}, config_from_dict(data), "f", 2).env["FSDP_OFFLOAD_PARAMS"] == "true"


def test_deepspeed_zero3_inline_options(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = Script(
        "5", "2",  # DeepSpeed on CPU processes
        "", "", "", "",  # 1 machine, 2 processes, no debug, no dynamo
        "",  # no DeepSpeed JSON file: the options are written inline
        "4",  # ZeRO-3
        "cpu", "",  # optimizer states offloaded to CPU, parameters not
        "2",  # gradient accumulation steps
        "y", "x", "0.5",  # clipping: a malformed value is asked again
        "y", "y",  # zero3 init, save 16-bit model
        "", "",  # no parallelism config, mixed precision no
    )  # fmt: skip
    data = script.ask(gpu_count=1)
    assert data["distributed_type"] == "DEEPSPEED" and data["use_cpu"] is True and "fsdp_config" not in data
    assert data["deepspeed_config"] == {
        "zero_stage": 3, "offload_optimizer_device": "cpu", "offload_param_device": "none",
        "gradient_accumulation_steps": 2, "gradient_clipping": 0.5, "zero3_init_flag": True,
        "zero3_save_16bit_model": True,
    }  # fmt: skip
    from accelerate.config.config_file import config_from_dict, save_config_file

    out = _dry_run(save_config_file(config_from_dict(data), home / "ds.yaml"), capsys)
    for needle in ("ACCELERATE_USE_DEEPSPEED=true", "ACCELERATE_DEEPSPEED_ZERO_STAGE=3", "DS_ACCELERATOR=cpu",
                   "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE=cpu", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2",
                   "ACCELERATE_DEEPSPEED_ZERO3_INIT=true"):  # fmt: skip
        assert needle in out, needle


def test_deepspeed_zero2_matches_what_upstream_writes() -> None:
    data = Script("DEEPSPEED", "", "", "", "", "", "", "", "", "", "", "", "").ask()
    assert data["deepspeed_config"] == {
        "zero_stage": 2, "offload_optimizer_device": "none", "offload_param_device": "none",
        "gradient_accumulation_steps": 1, "zero3_init_flag": False,
    }  # fmt: skip


def test_deepspeed_json_file(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds_json = home / "ds_config.json"
    ds_json.write_text('{"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": "auto"}')
    data = Script("5", "", "", "", "", "", "y", str(ds_json), "", "", "").ask()
    assert data["deepspeed_config"] == {"deepspeed_config_file": str(ds_json), "zero3_init_flag": False}
    from accelerate.config.config_file import config_from_dict, save_config_file

    out = _dry_run(save_config_file(config_from_dict(data), home / "ds.yaml"), capsys)
    assert f"ACCELERATE_DEEPSPEED_CONFIG_FILE={ds_json}" in out


def test_parallelism_sizes_are_asked_and_launch(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = Script(
        "MULTI_CPU", "", "4",  # CPU processes, 1 machine, 4 processes
        "", "",  # no debug checks, no dynamo
        "y",  # a parallelism config
        "",  # pp: 1 (no pipeline, so no schedule question)
        "2",  # tp
        "3", "",  # dp_replicate: 3 does not divide the 2 processes left, asked again; 1
        "3", "",  # dp_shard: only 2 completes the product, asked again; the default (2)
        "",  # mixed precision no
    )  # fmt: skip
    data = script.ask()
    assert data["parallelism_config"] == {
        "parallelism_config_pp_size": 1, "parallelism_config_tp_size": 2,
        "parallelism_config_dp_replicate_size": 1, "parallelism_config_dp_shard_size": 2,
    }  # fmt: skip
    screen = script.screen.getvalue()
    assert (
        "context-parallel" not in screen and "sequence-parallel" not in screen
    )  # not on CPU / without DeepSpeed
    assert "multiply to the number of processes (4)" in screen and "It must be 2" in screen
    from accelerate.config.config_file import config_from_dict, save_config_file

    out = _dry_run(save_config_file(config_from_dict(data), home / "nd.yaml"), capsys)
    for needle in ("ACCELERATE_USE_PARALLELISM_CONFIG=true", "PARALLELISM_CONFIG_TP_SIZE=2",
                   "PARALLELISM_CONFIG_DP_SHARD_SIZE=2", "mesh dims: dp_shard, tp"):  # fmt: skip
        assert needle in out, needle


def test_pipeline_questions_are_asked_and_launch(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = Script(
        "MULTI_CPU", "", "4",  # CPU processes, 1 machine, 4 processes
        "", "",  # no debug checks, no dynamo
        "y",  # a parallelism config
        "2",  # pp
        "", "",  # tp 1, dp_replicate 1
        "",  # dp_shard: the default that completes the product (2)
        "2",  # schedule: the second choice, GPipe
        "0", "4",  # micro-batches: 0 is refused, asked again; 4
        "",  # mixed precision no
    )  # fmt: skip
    data = script.ask()
    assert data["parallelism_config"] == {
        "parallelism_config_pp_size": 2, "parallelism_config_pp_schedule": "GPipe",
        "parallelism_config_pp_microbatches": 4, "parallelism_config_tp_size": 1,
        "parallelism_config_dp_replicate_size": 1, "parallelism_config_dp_shard_size": 2,
    }  # fmt: skip
    assert "Please give at least 1 (GPipe with 2 stages)" in script.screen.getvalue()
    from accelerate.config.config_file import config_from_dict, save_config_file

    out = _dry_run(save_config_file(config_from_dict(data), home / "pp.yaml"), capsys)
    for needle in ("PARALLELISM_CONFIG_PP_SIZE=2", "PARALLELISM_CONFIG_PP_SCHEDULE=GPipe",
                   "PARALLELISM_CONFIG_PP_MICROBATCHES=4", "PARALLELISM_CONFIG_DP_SHARD_SIZE=2"):  # fmt: skip
        assert needle in out, needle


def test_xla_is_offered_only_where_torch_xla_is_installed(home: Path) -> None:
    without = Script("6", "1", "", "")  # "6" is not a choice without torch_xla: asked again
    assert without.ask()["distributed_type"] == "NO"
    assert "TPU" not in without.screen.getvalue() and "number from 1 to 5" in without.screen.getvalue()
    data = Script("6", "4", "my-pod", "europe-west4-a", "bf16", "y").ask(xla_available=True)
    assert data == {
        **COMMON, "distributed_type": "XLA", "use_cpu": False, "num_processes": 4, "tpu_name": "my-pod",
        "tpu_zone": "europe-west4-a", "mixed_precision": "bf16", "downcast_bf16": "yes",
    }  # fmt: skip
    from accelerate.config.config_file import config_from_dict

    assert config_from_dict(data).distributed_type == "XLA"  # loads (launching it needs torch_xla)


def test_env_reports_the_optional_backends(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    assert main(["env"]) == 0
    rows = dict(
        line[2:].split(":", 1) for line in capsys.readouterr().out.splitlines() if line.startswith("- ")
    )
    for name in ("deepspeed", "torch_xla"):
        assert name in rows
        installed = importlib.util.find_spec(name) is not None
        assert (rows[name].strip() == "not installed") is not installed, rows[name]
