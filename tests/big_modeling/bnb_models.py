"""A small model and its checkpoint for the bitsandbytes tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 2 * dim)
        self.down = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.down(torch.relu(self.up(self.norm(x))))
        return out


class Net(nn.Module):
    """Input projection -> blocks -> output head (the head is what quantization leaves alone by default)."""

    def __init__(self, dim: int = 128, layers: int = 2, out: int = 16) -> None:
        super().__init__()
        self.embed = nn.Linear(32, dim)
        self.blocks = nn.ModuleList([Block(dim) for _ in range(layers)])
        self.head = nn.Linear(dim, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        out: torch.Tensor = self.head(x)
        return out


def reference(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net().eval()


def save_checkpoint(model: nn.Module, folder: Path, shards: int = 1, fmt: str = "safetensors") -> Path:
    """Writes ``model`` as one file, or as ``shards`` files with an index, in ``fmt`` ("safetensors" or "bin")."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    stem, suffix = ("model", "safetensors") if fmt == "safetensors" else ("pytorch_model", "bin")

    def write(part: dict[str, torch.Tensor], file: str) -> None:
        if fmt == "safetensors":
            save_file(part, str(folder / file))
        else:
            torch.save(part, folder / file)

    if shards == 1:
        write(state, f"{stem}.{suffix}")
        return folder
    names = list(state)
    weight_map: dict[str, str] = {}
    for index in range(shards):
        part = names[index::shards]
        file = f"{stem}-{index + 1:05d}-of-{shards:05d}.{suffix}"
        write({k: state[k] for k in part}, file)
        weight_map.update(dict.fromkeys(part, file))
    (folder / f"{stem}.{suffix}.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    return folder


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).norm() / ref.norm())


def stored_bytes(module: nn.Module) -> int:
    """Bytes of everything the module stores (its state dict: weights, scales, quantization state)."""
    return sum(
        t.numel() * t.element_size() for t in module.state_dict().values() if isinstance(t, torch.Tensor)
    )


def train_lora(base: nn.Module, accelerator: Any, steps: int = 30) -> tuple[Any, list[float]]:
    """LoRA adapters on ``base`` (peft, the QLoRA pattern) trained through ``accelerator.prepare``:
    the prepared model and the loss of each step."""
    import peft

    lora = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["up", "down"], lora_dropout=0.0)
    model = peft.get_peft_model(base, lora)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    torch.manual_seed(0)
    x, target = torch.randn(64, 32, device=accelerator.device), torch.randn(64, 16, device=accelerator.device)
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), target)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return model, losses
