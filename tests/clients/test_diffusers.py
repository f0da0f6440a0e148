"""diffusers as a real client: a tiny UNet2DModel trained with DDPMScheduler noise the way diffusers'
training examples do it (accumulate, EMAModel, save/load pre-hooks that save_pretrained the models
themselves), resumed with load_state to the same weights, then sampled with DDPMPipeline."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("diffusers")

from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel  # noqa: E402
from diffusers.training_utils import EMAModel  # noqa: E402

from accelerate import Accelerator  # noqa: E402
from accelerate.state import reset_state  # noqa: E402

STEPS, MICRO, BATCH = 4, 2, 4  # optimizer steps, micro-steps per step, samples per micro-step


def _unet() -> UNet2DModel:
    torch.manual_seed(0)
    return UNet2DModel(
        sample_size=8, in_channels=1, out_channels=1, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "UpBlock2D"), norm_num_groups=4,
    )  # fmt: skip


def _train(ckpt: Path, *, save_at: int | None, resume: bool) -> dict[str, Any]:
    reset_state()
    accelerator = Accelerator(gradient_accumulation_steps=MICRO)
    unet = _unet()
    ema = EMAModel(unet.parameters(), decay=0.9, model_cls=UNet2DModel, model_config=unet.config)
    scheduler = DDPMScheduler(num_train_timesteps=50)

    def save_hook(models: list[torch.nn.Module], weights: list[dict[str, Any]], output_dir: str) -> None:
        # diffusers writes each model in its own format and takes it off accelerate's hands.
        ema.save_pretrained(os.path.join(output_dir, "unet_ema"))
        for model in models:
            accelerator.unwrap_model(model).save_pretrained(os.path.join(output_dir, "unet"))
            weights.pop()

    def load_hook(models: list[torch.nn.Module], input_dir: str) -> None:
        loaded_ema = EMAModel.from_pretrained(os.path.join(input_dir, "unet_ema"), UNet2DModel)
        ema.load_state_dict(loaded_ema.state_dict())
        while models:
            model = accelerator.unwrap_model(models.pop())
            loaded = UNet2DModel.from_pretrained(input_dir, subfolder="unet")
            model.register_to_config(**loaded.config)
            model.load_state_dict(loaded.state_dict())

    accelerator.register_save_state_pre_hook(save_hook)
    accelerator.register_load_state_pre_hook(load_hook)
    optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-3)
    unet, optimizer = accelerator.prepare(unet, optimizer)
    images = torch.randn(STEPS * MICRO * BATCH, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(2)
    first = 0
    if resume:
        accelerator.load_state(str(ckpt))  # also restores the RNG that draws noise and timesteps
        first = save_at or 0
    losses = []
    for step in range(first, STEPS):
        for micro in range(MICRO):
            start = (step * MICRO + micro) * BATCH
            clean = images[start : start + BATCH]
            with accelerator.accumulate(unet):
                noise = torch.randn_like(clean)
                timesteps = torch.randint(0, scheduler.config.num_train_timesteps, (BATCH,))
                loss = F.mse_loss(unet(scheduler.add_noise(clean, noise, timesteps), timesteps).sample, noise)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            losses.append(loss.item())
        assert accelerator.sync_gradients
        ema.step(unet.parameters())
        if not resume and save_at == step + 1:
            accelerator.save_state(str(ckpt))
    plain = accelerator.unwrap_model(unet)
    weights = {k: v.clone() for k, v in plain.state_dict().items()}
    ema.copy_to(plain.parameters())  # sample with the EMA weights, as diffusers' examples do at the end
    pipeline = DDPMPipeline(unet=plain, scheduler=scheduler)
    pipeline.set_progress_bar_config(disable=True)
    samples = pipeline(
        batch_size=2, num_inference_steps=3, output_type="np", generator=torch.Generator().manual_seed(0)
    )
    return {
        "weights": weights,
        "ema": [p.clone() for p in ema.shadow_params],
        "losses": losses,
        "samples": samples.images,
    }


def test_diffusers_training_resumes_exactly_and_samples(tmp_path: Path) -> None:
    ckpt = tmp_path / "checkpoint-2"
    full = _train(ckpt, save_at=2, resume=False)
    assert (ckpt / "unet" / "config.json").exists() and (ckpt / "unet_ema" / "config.json").exists()
    assert not list(ckpt.glob("model*.safetensors"))  # the hook took the model off accelerate's hands
    resumed = _train(ckpt, save_at=2, resume=True)
    assert resumed["losses"] == full["losses"][2 * MICRO :]
    for key, value in full["weights"].items():
        assert torch.equal(resumed["weights"][key], value), key
    assert all(torch.equal(a, b) for a, b in zip(resumed["ema"], full["ema"], strict=True))
    assert full["samples"].shape == (2, 8, 8, 1) and (full["samples"] == resumed["samples"]).all()
