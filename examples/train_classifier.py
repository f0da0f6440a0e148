"""A complete small training run: synthetic data, an MLP, AdamW, a LR schedule, distributed eval.

Run it on one process:            python examples/train_classifier.py
or on two CPU processes:          accelerate launch --cpu --num_processes 2 examples/train_classifier.py
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from accelerate import Accelerator
from accelerate.utils import set_seed


def make_data(num_samples: int, centers: torch.Tensor, seed: int) -> TensorDataset:
    """Noisy samples around one center per class: learnable, but not in one step."""
    gen = torch.Generator().manual_seed(seed)
    num_classes, num_features = centers.shape
    labels = torch.randint(0, num_classes, (num_samples,), generator=gen)
    features = centers[labels] + 1.5 * torch.randn(num_samples, num_features, generator=gen)
    return TensorDataset(features, labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--mixed_precision", default=None, choices=["no", "fp16", "bf16"])
    parser.add_argument("--train_samples", type=int, default=2048)
    parser.add_argument("--eval_samples", type=int, default=500)
    args = parser.parse_args()

    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    set_seed(42)
    num_features, num_classes = 20, 4
    centers = torch.randn(num_classes, num_features, generator=torch.Generator().manual_seed(0))
    train_data = make_data(args.train_samples, centers, seed=1)
    eval_data = make_data(args.eval_samples, centers, seed=2)  # 500 by default: not a multiple of 64
    train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=True)
    eval_loader = DataLoader(eval_data, batch_size=64)

    model = torch.nn.Sequential(
        torch.nn.Linear(num_features, 64), torch.nn.ReLU(), torch.nn.Linear(64, num_classes)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    # Written for the single-process run's number of steps; see AcceleratedScheduler for why this
    # stays right on N processes.
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=args.epochs * len(train_loader)
    )

    # The five-line change: prepare, then backward through the accelerator.
    model, optimizer, train_loader, eval_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, eval_loader, scheduler
    )

    accelerator.print(
        f"Training on {accelerator.num_processes} process(es), device {accelerator.device}, "
        f"mixed precision {accelerator.mixed_precision}"
    )
    for epoch in range(args.epochs):
        model.train()
        bar = tqdm(
            train_loader,
            desc=f"epoch {epoch}",
            disable=not accelerator.is_local_main_process,
            mininterval=1.0,
        )
        for features, labels in bar:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(features), labels)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            bar.set_postfix(loss=f"{loss.item():.3f}")

        model.eval()
        correct = total = 0
        for features, labels in eval_loader:
            with torch.no_grad():
                predictions = model(features).argmax(dim=-1)
            predictions, labels = accelerator.gather_for_metrics((predictions, labels))
            correct += int((predictions == labels).sum())
            total += int(labels.numel())
        accelerator.print(f"epoch {epoch}: eval accuracy {correct / total:.4f} on {total} samples")

    accelerator.print(f"Final accuracy: {correct / total:.4f} ({correct}/{total})")
    accelerator.end_training()


if __name__ == "__main__":
    main()
