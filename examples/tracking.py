"""Log hyperparameters and metrics to an experiment tracker (TensorBoard here).

``Accelerator(log_with=..., project_dir=...)`` picks the tracker; ``init_trackers`` starts a run
and records the config; ``accelerator.log`` writes metrics from the main process only (the call
is safe on every process); ``end_training`` closes the run so the files are complete.

    accelerate launch --cpu --num_processes 2 examples/tracking.py --project_dir runs
    tensorboard --logdir runs
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import set_seed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--project_dir", required=True, help="where the tracker writes its runs")
    parser.add_argument("--run_name", default="tracking_example")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    accelerator = Accelerator(log_with="tensorboard", project_dir=args.project_dir)
    # TensorBoard takes flat scalars as hyperparameters: pass plain numbers and strings.
    accelerator.init_trackers(
        args.run_name, config={"lr": args.lr, "batch_size": args.batch_size, "epochs": args.epochs}
    )
    set_seed(0)
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(256, 8, generator=gen)
    targets = features @ torch.randn(8, 1, generator=gen)
    loader = DataLoader(TensorDataset(features, targets), batch_size=args.batch_size, shuffle=True)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    step = 0
    for epoch in range(args.epochs):
        total = torch.zeros((), device=accelerator.device)
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            total += loss.detach()
            step += 1
            accelerator.log({"train/loss": loss.item()}, step=step)
        # The epoch's mean loss over all processes, not just the main one's shard.
        epoch_loss = accelerator.reduce(total, reduction="mean").item() / len(loader)
        accelerator.log({"train/epoch_loss": epoch_loss, "epoch": epoch}, step=step)
        accelerator.print(f"epoch {epoch}: mean loss {epoch_loss:.4f}")
    accelerator.print(f"logged {step} steps to {args.project_dir}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
