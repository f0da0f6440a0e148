"""Launched by tests: an unchanged training loop whose DeepSpeed settings come from `accelerate launch`."""

import json
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import DummyOptim, DummyScheduler

accelerator = Accelerator()
plugin = accelerator.deepspeed_plugin
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
x = torch.randn(64, 6, generator=torch.Generator().manual_seed(1))
loader = DataLoader(TensorDataset(x, torch.stack([x.sum(1), x[:, 0]], 1)), batch_size=4)
if "optimizer" in plugin.deepspeed_config:  # the JSON defines them: DummyOptim/DummyScheduler stand for them
    optimizer = DummyOptim(model.parameters(), lr=0.02)
    scheduler = DummyScheduler(
        optimizer, total_num_steps=3 * len(loader) // accelerator.num_processes, warmup_num_steps=2
    )
else:
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.02)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
epoch_loss = []
for _epoch in range(3):
    total = 0.0
    for xb, yb in loader:
        loss = F.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        total += loss.item()
    epoch_loss.append(accelerator.gather(torch.tensor([total])).sum().item())
if accelerator.is_main_process:
    with open(sys.argv[1], "w") as f:
        json.dump(
            {
                "distributed_type": accelerator.distributed_type.value,
                "num_processes": accelerator.num_processes,
                "zero_stage": plugin.zero_stage,
                "engine_stage": model.zero_optimization_stage(),
                "micro": model.train_micro_batch_size_per_gpu(),
                "epoch_loss": epoch_loss,
            },
            f,
        )
accelerator.end_training()
