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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.commands.helpers import REPO, accelerate_cmd, cli_env, reserved_port
from tests.helpers.side_by_side import CommandOf, SideBySide, selected_runs

pytest.importorskip("transformers")

SCRIPT = str(REPO / "tests/clients/trainer_run.py")
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


def _one_process(*extra: str) -> CommandOf:
    def command(folder: Path, port: int) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, SCRIPT, str(folder), *ARGS, *extra], _env(folder)

    return command


def _accelerate_launch(folder: Path, port: int) -> tuple[list[str], dict[str, str]]:
    cmd = accelerate_cmd("launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port), SCRIPT,
                         str(folder), *ARGS)  # fmt: skip
    return cmd, _env(folder)


def _torchrun(script: str, *args: str, **env: str) -> CommandOf:
    # torchrun starts the processes itself; our state reads its RANK/WORLD_SIZE/MASTER_* (gloo on CPU).
    def command(folder: Path, port: int) -> tuple[list[str], dict[str, str]]:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
               script, str(folder), *args]  # fmt: skip
        return cmd, {**_env(folder), **env}

    return command


# Each test's run only writes its own folder: they run side by side, two at a time, the two
# one-process runs first (together they fill the two cores that one of them leaves half idle).
_CASES_OF_TEST = {
    "test_trainer_one_process": ["one_process"],
    "test_trainer_with_a_peft_lora_adapter": ["lora"],
    "test_trainer_two_processes_through_accelerate_launch": ["accelerate_launch"],
    "test_trainer_two_processes_through_torchrun": ["torchrun"],
    "test_trainer_under_deepspeed_with_accumulation_in_the_config": ["deepspeed"],
}


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideBySide]:
    commands: dict[str, CommandOf] = {
        "one_process": _one_process(),
        "accelerate_launch": _accelerate_launch,
        "torchrun": _torchrun(SCRIPT, *ARGS),
    }
    if importlib.util.find_spec("peft") is not None:
        commands["lora"] = _one_process("--lora")
    # Not imported here (it sets environment variables): only looked up.
    if importlib.util.find_spec("deepspeed") is not None:
        commands["deepspeed"] = _torchrun(
            str(REPO / "tests/clients/trainer_deepspeed_run.py"), DS_ACCELERATOR="cpu"
        )
    order = [name for names in _CASES_OF_TEST.values() for name in names if name in commands]
    with selected_runs(
        request, tmp_path_factory.mktemp("trainer"), {name: commands[name] for name in order},
        _CASES_OF_TEST, at_once=2, timeout=600, reserve_port=reserved_port,
    ) as side_by_side:  # fmt: skip
        yield side_by_side


def test_trainer_one_process(runs: SideBySide) -> None:
    _check(_report(runs.result("one_process")), world_size=1)


def test_trainer_two_processes_through_accelerate_launch(runs: SideBySide) -> None:
    _check(_report(runs.result("accelerate_launch")), world_size=2)


def test_trainer_two_processes_through_torchrun(runs: SideBySide) -> None:
    _check(_report(runs.result("torchrun")), world_size=2)


def test_trainer_with_a_peft_lora_adapter(runs: SideBySide) -> None:
    if importlib.util.find_spec("peft") is None:
        pytest.skip("peft is not installed")
    report = _report(runs.result("lora"))
    # Only the adapter (and the new classifier head peft keeps trainable for SEQ_CLS) trains and is saved.
    _check(report, world_size=1, saved=("adapter_model.safetensors", "adapter_config.json"))
    trainable = report["full"]["trainable"]
    assert trainable and all("lora_" in name or "classifier" in name for name in trainable)
    assert "model.safetensors" not in report["full"]["final_files"]


def test_trainer_under_deepspeed_with_accumulation_in_the_config(runs: SideBySide) -> None:
    # The Trainer builds its Accelerator with GradientAccumulationPlugin(num_steps=1) while the
    # DeepSpeed config says gradient_accumulation_steps: 2; as upstream the config wins (no error).
    if importlib.util.find_spec("deepspeed") is None:  # not imported here: it sets environment variables
        pytest.skip("DeepSpeed tests need deepspeed (make test installs it)")
    report = _report(runs.result("deepspeed"))
    assert report["world_size"] == 2 and report["distributed_type"] == "DEEPSPEED"
    assert report["engine_gas"] == 2 and report["accelerator_gas"] == 2
    # 4 optimizer steps of 2 micro-batches each, and the engine stepped exactly that often.
    assert report["global_step"] == report["engine_global_steps"] == 4
    assert len(report["losses"]) == 4 and report["changed"]
