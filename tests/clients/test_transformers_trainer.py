"""transformers' Trainer as a real client, unchanged: it trains, evaluates, saves, and resumes.

A tiny BERT built from a config on synthetic data (no Hub), in bf16 with gradient accumulation, in
one process and in two (``accelerate launch --cpu --num_processes 2``, and ``torchrun``), and with a peft LoRA
adapter. In each, a fresh Trainer
resumed from the uninterrupted run's ``checkpoint-2`` must end exactly where that run ended.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.commands.helpers import REPO, accelerate_cmd, cli_env, reserved_port

pytest.importorskip("transformers")

SCRIPT = "tests/clients/trainer_run.py"
ARGS = ("4", "--bf16", "--accumulation", "2")


def _report(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _env(tmp_path: Path) -> dict[str, str]:
    # This checkout's sources and the repository root (for tests.*); no Hub access.
    return cli_env(
        tmp_path / "hf_home",
        PYTHONPATH=f"{REPO / 'src'}:{REPO}",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )


def _check(
    report: dict[str, Any], world_size: int, saved: tuple[str, ...] = ("model.safetensors", "config.json")
) -> None:
    full, resumed = report["full"], report["resumed"]
    assert full["world_size"] == world_size
    assert full["mixed_precision"] == "bf16"
    assert full["distributed_type"] == ("NO" if world_size == 1 else "MULTI_CPU")
    assert full["global_step"] == resumed["global_step"] == 4
    assert full["checkpoints"] == ["checkpoint-2", "checkpoint-4"]
    assert set(saved) <= set(full["final_files"])
    # The loss fell and was logged once per optimizer step.
    assert len(full["losses"]) == 4 and full["losses"][-1] < full["losses"][0]
    # Resumed from checkpoint-2: the same later losses, parameters and evaluation, bit for bit.
    assert resumed["losses"] == full["losses"]
    assert resumed["params"] == full["params"]
    assert resumed["eval_loss"] == full["eval_loss"]
    assert resumed["checkpoints"] == ["checkpoint-4"]
    # The first Trainer still works after the second was built, and evaluates the same.
    assert full["eval_loss_after_second_trainer"] == full["eval_loss"]


def test_trainer_one_process(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, SCRIPT, str(tmp_path), *ARGS],
        cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    _check(_report(proc), world_size=1)


def test_trainer_two_processes_through_accelerate_launch(tmp_path: Path) -> None:
    with reserved_port() as port:
        proc = subprocess.run(
            accelerate_cmd("launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port), SCRIPT,
                           str(tmp_path), *ARGS),
            cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    _check(_report(proc), world_size=2)


def test_trainer_two_processes_through_torchrun(tmp_path: Path) -> None:
    # torchrun starts the processes itself; our state reads its RANK/WORLD_SIZE/MASTER_* (gloo on CPU).
    with reserved_port() as port:
        proc = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
             SCRIPT, str(tmp_path), *ARGS],
            cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    _check(_report(proc), world_size=2)


def test_trainer_with_a_peft_lora_adapter(tmp_path: Path) -> None:
    pytest.importorskip("peft")
    proc = subprocess.run(
        [sys.executable, SCRIPT, str(tmp_path), *ARGS, "--lora"],
        cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    report = _report(proc)
    # Only the adapter (and the new classifier head peft keeps trainable for SEQ_CLS) trains and is saved.
    _check(report, world_size=1, saved=("adapter_model.safetensors", "adapter_config.json"))
    trainable = report["full"]["trainable"]
    assert trainable and all("lora_" in name or "classifier" in name for name in trainable)
    assert "model.safetensors" not in report["full"]["final_files"]


def test_trainer_under_deepspeed_with_accumulation_in_the_config(tmp_path: Path) -> None:
    # The Trainer builds its Accelerator with GradientAccumulationPlugin(num_steps=1) while the
    # DeepSpeed config says gradient_accumulation_steps: 2; as upstream the config wins (no error).
    if importlib.util.find_spec("deepspeed") is None:  # not imported here: it sets environment variables
        pytest.skip("DeepSpeed tests need deepspeed (make test installs it)")
    with reserved_port() as port:
        proc = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
             "tests/clients/trainer_deepspeed_run.py", str(tmp_path)],
            cwd=REPO, env={**_env(tmp_path), "DS_ACCELERATOR": "cpu"}, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    report = _report(proc)
    assert report["world_size"] == 2 and report["distributed_type"] == "DEEPSPEED"
    assert report["engine_gas"] == 2 and report["accelerator_gas"] == 2
    # 4 optimizer steps of 2 micro-batches each, and the engine stepped exactly that often.
    assert report["global_step"] == report["engine_global_steps"] == 4
    assert len(report["losses"]) == 4 and report["changed"]
