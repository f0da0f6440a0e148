"""A complete small training run: synthetic data, an MLP, AdamW, a LR schedule, distributed eval.

Run it on one process:            python examples/train_classifier.py
or on two CPU processes:          accelerate launch --cpu --num_processes 2 examples/train_classifier.py

With ``--checkpoint_dir DIR --checkpoint_every N`` it saves a checkpoint every N optimizer steps and
starts from the newest one in DIR if there is one (mid-epoch included, at any number of processes):
the same command continues an interrupted run, and an elastic group that re-forms at another size
(``make demo-multinode``) carries on where the old one stopped.
``--process_group_timeout SECONDS`` shortens how long a collective waits for a stalled process
(the hang watchdog reports it after 3/4 of that); ``make chaos`` runs this script under random faults.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from accelerate import Accelerator
from accelerate.utils import (
    DataLoaderConfiguration,
    InitProcessGroupKwargs,
    ProjectConfiguration,
    set_seed,
)


def make_data(num_samples: int, centers: torch.Tensor, seed: int) -> TensorDataset:
    """Noisy samples around one center per class: learnable, but not in one step."""
    gen = torch.Generator().manual_seed(seed)
    num_classes, num_features = centers.shape
    labels = torch.randint(0, num_classes, (num_samples,), generator=gen)
    features = centers[labels] + 1.5 * torch.randn(num_samples, num_features, generator=gen)
    return TensorDataset(features, labels)


class Progress:
    """Epoch and optimizer step, saved with each checkpoint so a resumed run knows where it is."""

    def __init__(self) -> None:
        self.epoch = 0
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.step = state["epoch"], state["step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--mixed_precision", default=None, choices=["no", "fp16", "bf16"])
    parser.add_argument("--train_samples", type=int, default=2048)
    parser.add_argument("--eval_samples", type=int, default=500)
    parser.add_argument(
        "--checkpoint_dir", default=None, help="save here and resume from the newest checkpoint"
    )
    parser.add_argument(
        "--checkpoint_every", type=int, default=100, help="optimizer steps between checkpoints"
    )
    parser.add_argument(
        "--process_group_timeout",
        type=float,
        default=None,
        help="seconds a collective may wait for a peer (a stalled process is reported after 3/4 of it)",
    )
    args = parser.parse_args()

    checkpointing = {}
    if args.checkpoint_dir is not None:
        checkpointing = {
            # checkpoints/checkpoint_0, _1, ... under the folder; the two newest are kept.
            "project_config": ProjectConfiguration(
                project_dir=args.checkpoint_dir, automatic_checkpoint_naming=True, total_limit=2
            ),
            # The loader's position is saved too, so a resumed epoch goes on with the next batch.
            "dataloader_config": DataLoaderConfiguration(use_stateful_dataloader=True),
        }
    handlers = []
    if args.process_group_timeout is not None:
        # The hang watchdog reports a stalled process after 3/4 of this (accelerate's default: 10 min).
        handlers.append(InitProcessGroupKwargs(timeout=timedelta(seconds=args.process_group_timeout)))
    accelerator = Accelerator(mixed_precision=args.mixed_precision, kwargs_handlers=handlers, **checkpointing)
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

    progress = Progress()
    if args.checkpoint_dir is not None:
        accelerator.register_for_checkpointing(progress)
        if accelerator.load_state(missing_ok=True) is not None:  # None: no checkpoint yet, a fresh start
            accelerator.print(f"Continuing at epoch {progress.epoch}, optimizer step {progress.step}")

    accelerator.print(
        f"Training on {accelerator.num_processes} process(es), device {accelerator.device}, "
        f"mixed precision {accelerator.mixed_precision}"
    )
    correct = total = 0
    for epoch in range(progress.epoch, args.epochs):
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
            progress.step += 1
            # Shown at the bar's next refresh, with the count it has then (refreshing here would
            # print the count as of the last refresh: a stale 0/32 when written to a file or pipe).
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
            # Not after the epoch's last batch: its loader position already means "next epoch",
            # while `progress.epoch` moves on only after the evaluation below.
            end_of_epoch = accelerator.gradient_state.end_of_dataloader
            if (
                args.checkpoint_dir is not None
                and progress.step % args.checkpoint_every == 0
                and not end_of_epoch
            ):
                accelerator.save_state()

        model.eval()
        correct = total = 0
        for features, labels in eval_loader:
            with torch.no_grad():
                predictions = model(features).argmax(dim=-1)
            predictions, labels = accelerator.gather_for_metrics((predictions, labels))
            correct += int((predictions == labels).sum())
            total += int(labels.numel())
        accelerator.print(f"epoch {epoch}: eval accuracy {correct / total:.4f} on {total} samples")
        progress.epoch = epoch + 1

    if total:
        accelerator.print(f"Final accuracy: {correct / total:.4f} ({correct}/{total})")
    accelerator.end_training()


if __name__ == "__main__":
    main()
