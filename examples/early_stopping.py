"""Stop every process at the same step when any one of them decides to stop.

Each process sees only its own shard, so their losses differ: one may fall below the threshold
while the others have not. ``accelerator.set_trigger()`` raises a flag on that process, and
``accelerator.check_trigger()`` (called by all processes at the same point) is true everywhere as
soon as any process raised it. Breaking on a local condition instead would leave the other
processes waiting forever in the next collective.

    accelerate launch --cpu --num_processes 2 examples/early_stopping.py
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
    parser.add_argument("--max_steps", type=int, default=200)
    parser.add_argument("--loss_threshold", type=float, default=0.05)
    parser.add_argument("--batch_size", type=int, default=8)
    args = parser.parse_args()

    accelerator = Accelerator()
    set_seed(0)
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(512, 4, generator=gen)
    targets = features @ torch.randn(4, 1, generator=gen) + 0.05 * torch.randn(512, 1, generator=gen)
    loader = DataLoader(TensorDataset(features, targets), batch_size=args.batch_size, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    step = 0
    stopped = False
    while step < args.max_steps and not stopped:
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if loss.item() < args.loss_threshold:
                print(
                    f"rank {accelerator.process_index}: local loss {loss.item():.4f} below threshold at step {step}"
                )
                accelerator.set_trigger()
            if accelerator.check_trigger():  # a collective: every process calls it every step
                stopped = True
                break
            if step >= args.max_steps:
                break

    if stopped:
        print(f"rank {accelerator.process_index}: early stop at step {step}", flush=True)
    else:
        print(f"rank {accelerator.process_index}: no early stop, ran all {step} steps", flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
