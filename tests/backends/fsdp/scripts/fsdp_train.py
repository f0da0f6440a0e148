"""Launched by tests/backends/fsdp/test_fsdp_launch.py: trains the tiny transformer with whatever FSDP the
launcher configured (no plugin in the code) and writes one rank<N>.json per rank into the folder argv[1]."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fsdp_models import BertLayer, dataset, make_model  # noqa: E402

from accelerate import Accelerator  # noqa: E402


def main() -> None:
    accelerator = Accelerator()
    model = make_model(block=BertLayer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = dataset(32)
    model, optimizer, loader = accelerator.prepare(
        model, optimizer, DataLoader(TensorDataset(x, y), batch_size=4)
    )
    losses = []
    for xb, yb in loader:
        loss = F.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    plugin = accelerator.state.fsdp_plugin
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())
    result = {
        "rank": accelerator.process_index,
        "type": accelerator.distributed_type.value,
        "is_fsdp2": accelerator.is_fsdp2,
        "fraction": local / sum(p.numel() for p in model.parameters()),
        "wrapped": plugin.transformer_cls_names_to_wrap,
        "state_dict_type": plugin.state_dict_type,
        "describe": accelerator.strategy.describe(),
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }
    Path(sys.argv[1], f"rank{accelerator.process_index}.json").write_text(json.dumps(result))
    accelerator.end_training()


if __name__ == "__main__":
    main()
