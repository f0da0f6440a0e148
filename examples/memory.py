"""Find the largest batch size that fits, with ``find_executable_batch_size``.

The decorated function takes the batch size as its first argument; the decorator calls it with
``starting_batch_size`` and, each time it raises an out-of-memory error, frees what it can and
calls it again with a size 10% smaller (``int(size * 0.9)``, as upstream). Everything sized by the batch (dataloader, and here the
model and optimizer too) is built inside the function, so each retry starts clean.

A CPU does not run out of memory on a toy model, so ``--max_fitting_batch`` pretends: a larger
batch raises ``torch.OutOfMemoryError``, as an accelerator would.

    accelerate launch --cpu --num_processes 2 examples/memory.py --max_fitting_batch 20
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import find_executable_batch_size, set_seed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--starting_batch_size", type=int, default=128)
    parser.add_argument("--max_fitting_batch", type=int, default=20, help="pretend memory limit, in samples")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    accelerator = Accelerator()
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(256, 8, generator=gen)
    targets = features @ torch.randn(8, 1, generator=gen)

    @find_executable_batch_size(starting_batch_size=args.starting_batch_size)
    def train(batch_size: int) -> float:
        accelerator.free_memory()  # drops references to the previous attempt's prepared objects
        accelerator.print(f"trying batch size {batch_size}")
        set_seed(0)
        loader = DataLoader(TensorDataset(features, targets), batch_size=batch_size, shuffle=True)
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for _ in range(args.epochs):
            for x, y in loader:
                if x.shape[0] > args.max_fitting_batch:
                    raise torch.OutOfMemoryError(
                        f"out of memory: pretend limit is {args.max_fitting_batch} samples"
                    )
                loss = F.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        accelerator.print(f"trained with batch size {batch_size}")
        return loss.item()

    final_loss = train()  # called without the batch size: the decorator supplies it
    accelerator.print(f"final loss {final_loss:.4f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
