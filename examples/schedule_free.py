"""Training with a schedule-free optimizer (``schedulefree.AdamWScheduleFree``).

Schedule-free optimizers need no learning-rate schedule, but keep two sets of weights: the
ones gradients are taken at (training) and an averaged set (evaluation). So the optimizer, not
only the model, switches mode: ``optimizer.train()`` before training steps and ``optimizer.eval()``
before evaluating or saving. The prepared optimizer passes both calls through.

    pip install schedulefree
    accelerate launch --cpu --num_processes 2 examples/schedule_free.py
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import set_seed

try:
    import schedulefree
except ImportError:  # an optional dependency of this example only
    sys.exit("examples/schedule_free.py needs schedulefree: install it with `pip install schedulefree`.")


def make_data(num_samples: int, centers: torch.Tensor, seed: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, centers.shape[0], (num_samples,), generator=gen)
    return TensorDataset(centers[labels] + torch.randn(num_samples, centers.shape[1], generator=gen), labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--warmup_steps", type=int, default=5)
    args = parser.parse_args()

    accelerator = Accelerator()
    set_seed(0)
    centers = 2 * torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    train_loader = DataLoader(make_data(512, centers, seed=1), batch_size=args.batch_size, shuffle=True)
    eval_loader = DataLoader(make_data(150, centers, seed=2), batch_size=32)
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    # No scheduler: warmup is built into the optimizer.
    optimizer = schedulefree.AdamWScheduleFree(model.parameters(), lr=args.lr, warmup_steps=args.warmup_steps)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(
        model, optimizer, train_loader, eval_loader
    )

    for epoch in range(args.epochs):
        model.train()
        optimizer.train()  # gradients are taken at the training point
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()

        model.eval()
        optimizer.eval()  # swaps in the averaged weights that are meant for evaluation
        correct = total = 0
        for x, y in eval_loader:
            with torch.no_grad():
                predictions = model(x).argmax(dim=-1)
            predictions, y = accelerator.gather_for_metrics((predictions, y))
            correct += int((predictions == y).sum())
            total += y.numel()
        accelerator.print(f"epoch {epoch}: eval accuracy {correct / total:.3f} on {total} samples")
    accelerator.print(f"final accuracy {correct / total:.3f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
