"""The training-loop patterns of diffusers' example scripts, written the way those scripts write them
(no diffusers needed): accumulate(), an EMA copy of the model, save/load pre-hooks that store the
models themselves in sub-folders and take them off accelerate's hands, save_state/load_state resume."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from accelerate import Accelerator
from accelerate.state import reset_state


class EMA:
    """An exponential moving average of a model's parameters, registered for checkpointing."""

    def __init__(self, model: torch.nn.Module, decay: float = 0.9) -> None:
        self.shadow = copy.deepcopy(model).requires_grad_(False)
        self.decay = decay

    @torch.no_grad()
    def step(self, model: torch.nn.Module) -> None:
        for shadow, param in zip(self.shadow.parameters(), model.parameters(), strict=True):
            shadow.lerp_(param, 1 - self.decay)

    def state_dict(self) -> dict[str, object]:
        return {"decay": self.decay, "shadow": self.shadow.state_dict()}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.decay = float(state["decay"])  # type: ignore[arg-type]
        self.shadow.load_state_dict(state["shadow"])  # type: ignore[arg-type]


def _unet() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 24), torch.nn.SiLU(), torch.nn.Linear(24, 6))


def _run(ckpt: Path, *, steps: int, save_at: int | None, resume: bool) -> dict[str, torch.Tensor]:
    reset_state()
    torch.manual_seed(0)
    accelerator = Accelerator(gradient_accumulation_steps=2)
    unet = _unet()
    ema = EMA(unet)

    def save_model_hook(models: list[torch.nn.Module], weights: list[dict], output_dir: str) -> None:
        # diffusers saves each model itself (save_pretrained) and pops its weights so accelerate does not.
        for i, model in enumerate(models):
            folder = Path(output_dir) / f"unet_{i}"
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(accelerator.unwrap_model(model).state_dict(), folder / "weights.pt")
            weights.pop()

    def load_model_hook(models: list[torch.nn.Module], input_dir: str) -> None:
        # ... and loads them itself, popping them so accelerate does not look for their weights.
        while models:
            model = models.pop()
            state = torch.load(Path(input_dir) / f"unet_{len(models)}" / "weights.pt", weights_only=True)
            accelerator.unwrap_model(model).load_state_dict(state)

    accelerator.register_save_state_pre_hook(save_model_hook)
    accelerator.register_load_state_pre_hook(load_model_hook)
    optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-2)
    data = torch.utils.data.TensorDataset(torch.randn(48, 6), torch.randn(48, 6))
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    accelerator.register_for_checkpointing(ema)
    if resume:
        accelerator.load_state(str(ckpt))
    done = 0 if not resume else save_at or 0
    for x, y in loader:
        if done >= steps:
            break
        if resume and done < (save_at or 0):
            done += 1
            continue
        with accelerator.accumulate(unet):
            loss = F.mse_loss(unet(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        if accelerator.sync_gradients:
            ema.step(accelerator.unwrap_model(unet))
        done += 1
        if save_at is not None and not resume and done == save_at:
            accelerator.save_state(str(ckpt))
            return {}
    params = torch.cat([p.detach().reshape(-1) for p in accelerator.unwrap_model(unet).parameters()])
    shadow = torch.cat([p.reshape(-1) for p in ema.shadow.parameters()])
    return {"params": params, "ema": shadow}


def test_diffusers_style_loop_resumes_exactly(tmp_path: Path) -> None:
    ckpt = tmp_path / "checkpoint-4"
    full = _run(ckpt, steps=10, save_at=None, resume=False)
    _run(ckpt, steps=10, save_at=4, resume=False)
    assert (ckpt / "unet_0" / "weights.pt").is_file()  # the hook saved the model itself ...
    assert not any(
        name.startswith(("model", "pytorch_model")) for name in os.listdir(ckpt)
    )  # ... not accelerate
    resumed = _run(ckpt, steps=10, save_at=4, resume=True)
    assert torch.equal(resumed["params"], full["params"])
    assert torch.equal(resumed["ema"], full["ema"])
