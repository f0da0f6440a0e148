"""A small model and its checkpoint for the bitsandbytes tests."""

from __future__ import annotations

import json
from pathlib import Path

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


def save_checkpoint(model: nn.Module, folder: Path, shards: int = 1) -> Path:
    """Writes ``model`` as ``model.safetensors``, or as ``shards`` files with an index."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if shards == 1:
        save_file(state, str(folder / "model.safetensors"))
        return folder
    names = list(state)
    weight_map: dict[str, str] = {}
    for index in range(shards):
        part = names[index::shards]
        file = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        save_file({k: state[k] for k in part}, str(folder / file))
        weight_map.update(dict.fromkeys(part, file))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return folder


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).norm() / ref.norm())


def stored_bytes(module: nn.Module) -> int:
    """Bytes of everything the module stores (its state dict: weights, scales, quantization state)."""
    return sum(t.numel() * t.element_size() for t in module.state_dict().values() if isinstance(t, torch.Tensor))
