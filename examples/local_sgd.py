"""Local SGD: each process takes a few optimizer steps on its own, then all average their weights.

Inside ``LocalSGD`` the per-step gradient all-reduce is switched off, so the processes' models
drift apart; every ``--local_sgd_steps`` optimizer steps (and on leaving the block) the parameters
are averaged. Fewer, larger communications: useful on slow interconnects.

    accelerate launch --cpu --num_processes 2 examples/local_sgd.py
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.local_sgd import LocalSGD
from accelerate.utils import set_seed


def spread_across_processes(accelerator: Accelerator, model: torch.nn.Module) -> float:
    """Largest difference of any parameter between the processes (0 when they hold the same model)."""
    flat = torch.cat([p.detach().reshape(-1) for p in accelerator.unwrap_model(model).parameters()])
    everyone = accelerator.gather(flat.unsqueeze(0))  # one row per process
    return float((everyone.max(dim=0).values - everyone.min(dim=0).values).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--local_sgd_steps", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=8)
    args = parser.parse_args()

    accelerator = Accelerator()
    set_seed(0)
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(232, 6, generator=gen)  # 15 steps an epoch: not a multiple of 4
    targets = features @ torch.randn(6, 1, generator=gen)
    loader = DataLoader(TensorDataset(features, targets), batch_size=args.batch_size, shuffle=True)
    model = torch.nn.Linear(6, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    step = 0
    with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=args.local_sgd_steps) as local_sgd:
        for epoch in range(args.epochs):
            for x, y in loader:
                loss = F.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                local_sgd.step()  # counts the step; averages the weights every local_sgd_steps
                step += 1
                if step <= 2 * args.local_sgd_steps:
                    spread = spread_across_processes(accelerator, model)
                    accelerator.print(f"step {step}: spread across processes {spread:.2e}")
            accelerator.print(f"epoch {epoch}: loss {loss.item():.4f}")
    # Leaving the block averaged once more, so every process ends with the same model.
    accelerator.print(f"final spread across processes {spread_across_processes(accelerator, model):.2e}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
