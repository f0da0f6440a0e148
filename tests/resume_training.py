"""A training run that can stop after a step, save, and be resumed elsewhere (used by test_resume).

Run directly: ``python -m tests.resume_training MODE CKPT_DIR OUT_JSON`` with MODE ``full``,
``first`` (train up to SAVE_AT, save_state, stop) or ``resume`` (load_state, finish).
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import set_seed
from tests.helpers.progress import Progress

TOTAL_STEPS = 24


def train(mode: str, ckpt_dir: str, save_at: int) -> dict[str, Any]:
    set_seed(1234)
    accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=3)
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(50, 8, generator=gen), torch.randn(50, 2, generator=gen))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 2)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.9)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    if mode == "resume":
        # A fresh process would start from other random states; make sure nothing leaks through.
        torch.manual_seed(999)
        random.seed(999)
        np.random.seed(999)
        accelerator.load_state(ckpt_dir)
    losses: list[float] = []
    while progress.step < TOTAL_STEPS:
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = F.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            losses.append(loss.item())
            progress.step += 1
            if mode == "first" and progress.step == save_at:
                accelerator.save_state(ckpt_dir)
                return {"losses": losses}
            if progress.step == TOTAL_STEPS:
                break
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return {
        "losses": losses,
        "params": params.tolist(),
        "scale": accelerator.scaler.get_scale() if accelerator.scaler else None,
    }


if __name__ == "__main__":
    mode, ckpt, out = sys.argv[1], sys.argv[2], sys.argv[3]
    result = train(mode, ckpt, save_at=int(sys.argv[4]) if len(sys.argv) > 4 else 16)
    with open(out, "w") as f:
        json.dump(result, f)
