"""Exact resumption: stop, save_state, load_state in a fresh process, continue — bitwise identical.

Shuffling, dropout RNG, the mid-epoch position, the fp16 scaler and the accumulation counter are
all part of what must be restored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.pool import WorkerPool
from tests.resume_training import train

ROOT = Path(__file__).resolve().parents[1]


def _run(mode: str, ckpt: Path, out: Path, save_at: int) -> dict[str, object]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tests.resume_training", mode, str(ckpt), str(out), str(save_at)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_resume_in_a_fresh_process_is_bitwise_identical(tmp_path: Path) -> None:
    # 13 batches per epoch: step 16 is mid-epoch 2, and the accumulation counter (reset at the
    # epoch end) is 3 there, so a resume that forgot it would sync on the wrong steps.
    save_at = 16
    full = train("full", str(tmp_path / "unused"), save_at)
    first = _run("first", tmp_path / "ckpt", tmp_path / "first.json", save_at)
    resumed = _run("resume", tmp_path / "ckpt", tmp_path / "resumed.json", save_at)
    assert first["losses"] == full["losses"][:save_at]
    assert resumed["losses"] == full["losses"][save_at:]
    assert resumed["params"] == full["params"]
    assert resumed["scale"] == full["scale"]


def test_resume_in_two_processes_is_bitwise_identical(pool2: WorkerPool, tmp_path: Path) -> None:
    save_at = 10  # 7 rounds per epoch on 2 ranks: mid-epoch 2, accumulation counter 3
    ckpt = str(tmp_path / "ckpt")
    full = pool2.run(train, "full", ckpt, save_at)
    first = pool2.run(train, "first", ckpt, save_at)
    resumed = pool2.run(train, "resume", ckpt, save_at)
    for rank in range(2):
        assert first[rank]["losses"] == full[rank]["losses"][:save_at]
        assert resumed[rank]["losses"] == full[rank]["losses"][save_at:]
        assert resumed[rank]["params"] == full[rank]["params"]


def _save_on_two_ranks(ckpt: str) -> list[float]:
    from tests.resume_training import train as run

    return run("first", ckpt, 5)["losses"]


def _load_into_fresh_run(ckpt: str) -> dict[str, object]:
    """Loads ``ckpt`` into the training set-up of tests.resume_training; reports what came back."""
    import torch

    from accelerate import Accelerator
    from accelerate.storage.model_files import load_state_dict_file

    accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=3)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 2)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.9)
    data = torch.utils.data.TensorDataset(torch.randn(50, 8), torch.randn(50, 2))
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    from tests.resume_training import Progress

    progress = Progress()  # the saving run registered one: a saved object nobody receives is an error
    accelerator.register_for_checkpointing(progress)
    accelerator.load_state(ckpt, strict=True)
    saved = load_state_dict_file(os.path.join(ckpt, "model.safetensors"))
    mine = accelerator.unwrap_model(model).state_dict()
    saved_opt = torch.load(os.path.join(ckpt, "optimizer.bin"), weights_only=True)
    return {
        "weights_equal": all(torch.equal(mine[name], saved[name]) for name in saved)
        and set(mine) == set(saved),
        "optimizer_steps": [float(s["step"]) for s in optimizer.state_dict()["state"].values()],
        "saved_optimizer_steps": [float(s["step"]) for s in saved_opt["state"].values()],
        "scheduler_epoch": scheduler.scheduler.last_epoch,
        "saved_scheduler_epoch": torch.load(os.path.join(ckpt, "scheduler.bin"), weights_only=True)[
            "last_epoch"
        ],
        "step": accelerator.step,
        "skipped": len(loader) - sum(1 for _ in loader),
    }


def test_checkpoint_from_two_processes_loads_in_one(pool2: WorkerPool, tmp_path: Path) -> None:
    """Model, optimizer and scheduler load across world sizes; the data position is re-split."""
    ckpt = tmp_path / "ckpt"
    pool2.run(_save_on_two_ranks, str(ckpt))
    got = _load_into_fresh_run(str(ckpt))
    assert got["weights_equal"] and got["optimizer_steps"] == got["saved_optimizer_steps"]
    assert got["scheduler_epoch"] == got["saved_scheduler_epoch"]
    assert got["step"] == 5  # the accumulation counter comes from the checkpoint
    # 5 steps of 2 ranks = 10 per-rank batches = 10 underlying batches: one process resumes at batch 10.
    assert got["skipped"] == 10


def test_checkpoint_from_one_process_loads_in_two(pool2: WorkerPool, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    train("first", str(ckpt), 6)  # 6 underlying batches, at the end of an accumulation window
    for got in pool2.run(_load_into_fresh_run, str(ckpt)):
        assert got["weights_equal"] and got["optimizer_steps"] == got["saved_optimizer_steps"]
        assert got["scheduler_epoch"] == got["saved_scheduler_epoch"] and got["step"] == 6
        assert got["skipped"] == 3  # 6 underlying batches = 3 steps of 2 processes


def test_automatic_naming_rotation_and_latest(tmp_path: Path) -> None:
    import pytest
    import torch

    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    config = ProjectConfiguration(project_dir=str(tmp_path), automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(project_config=config)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    for value in (1.0, 2.0, 3.0):
        with torch.no_grad():
            model.weight.fill_(value)
        accelerator.save_state()
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["checkpoint_1", "checkpoint_2"]  # the oldest went only after the newest committed
    with torch.no_grad():
        model.weight.fill_(0.0)
    accelerator.load_state()
    assert float(model.weight.detach()[0, 0]) == 3.0
    assert accelerator.save_iteration == 3
    with pytest.raises(ValueError, match="automatic_checkpoint_naming"):
        accelerator.save_state(str(tmp_path / "elsewhere"))


def test_save_state_without_a_folder_says_how_to_name_one() -> None:
    import pytest

    from accelerate import Accelerator

    with pytest.raises(ValueError, match="needs a folder"):
        Accelerator().save_state()


def _resume_at_every_step(ckpt_root: str) -> list[str]:
    """Saves after each step of a short run in turn and resumes from it; returns the mismatches."""
    from accelerate.state import reset_state
    from tests.resume_training import TOTAL_STEPS

    reset_state()
    full = train("full", "unused", 0)
    mismatches = []
    for save_at in range(1, TOTAL_STEPS):
        ckpt = os.path.join(ckpt_root, f"at_{save_at}")
        reset_state()
        first = train("first", ckpt, save_at)
        reset_state()
        resumed = train("resume", ckpt, save_at)
        if first["losses"] + resumed["losses"] != full["losses"]:
            mismatches.append(f"losses differ after resuming at step {save_at}")
        if resumed["params"] != full["params"] or resumed["scale"] != full["scale"]:
            mismatches.append(f"parameters or loss scale differ after resuming at step {save_at}")
    return mismatches


def test_resume_at_every_step_is_bitwise_identical(tmp_path: Path) -> None:
    # Epoch ends, accumulation boundaries and scheduler steps all fall on some save point.
    assert _resume_at_every_step(str(tmp_path)) == []


def test_resume_at_every_step_in_two_processes(pool2: WorkerPool, tmp_path: Path) -> None:
    assert pool2.run(_resume_at_every_step, str(tmp_path), timeout=240) == [[], []]
