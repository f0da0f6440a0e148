"""Gradient accumulation, fixed or automatic.

fixed: ``Accelerator(gradient_accumulation_steps=N)`` and ``with accelerator.accumulate(model)``.
    The optimizer steps (and gradients are all-reduced) once every N micro-batches, so N batches
    of B train like one batch of N * B.
auto: we want an effective batch of ``--target_batch_size`` samples per process, but do not know
    what fits in memory. ``find_executable_batch_size`` finds the largest micro-batch that runs
    (here a pretend memory limit, ``--max_fitting_batch``, raises an out-of-memory error), and a
    ``GradientAccumulationPlugin`` accumulates enough micro-batches to reach the target.
compare: the big batch (``--batch_size * --gradient_accumulation_steps`` samples, no accumulation,
    as if it fitted), then fixed, then auto, one after the other: the three weight checksums agree.

    accelerate launch --cpu --num_processes 2 examples/gradient_accumulation.py --mode fixed
    accelerate launch --cpu --num_processes 2 examples/gradient_accumulation.py --mode auto
    accelerate launch --cpu --num_processes 2 examples/gradient_accumulation.py --mode compare \
        --max_fitting_batch 5
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import GradientAccumulationPlugin, find_executable_batch_size, set_seed


def train(
    args: argparse.Namespace, batch_size: int, accumulation_steps: int, memory_limit: int | None
) -> Accelerator:
    plugin = GradientAccumulationPlugin(num_steps=accumulation_steps)
    accelerator = Accelerator(gradient_accumulation_plugin=plugin)
    if memory_limit is not None and batch_size > memory_limit:
        # Stands in for a real allocation failure on an accelerator; find_executable_batch_size
        # recognises out-of-memory errors and retries with half the batch size.
        raise torch.OutOfMemoryError(f"out of memory: pretend limit is {memory_limit} samples")
    set_seed(0)
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(256, 8, generator=gen)
    targets = features @ torch.randn(8, 1, generator=gen)
    loader = DataLoader(TensorDataset(features, targets), batch_size=batch_size)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    optimizer_steps = 0
    for _ in range(args.epochs):
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = F.mse_loss(model(x), y)
                accelerator.backward(loss)  # scaled by 1 / accumulation_steps for us
                if accelerator.sync_gradients:
                    optimizer_steps += 1
                optimizer.step()  # a no-op on the micro-batches that only accumulate
                optimizer.zero_grad()
    weights = accelerator.unwrap_model(model)
    checksum = sum(float(p.detach().double().sum()) for p in weights.parameters())
    accelerator.print(f"micro-batch {batch_size} x {accumulation_steps} accumulation steps: "
                      f"{optimizer_steps} optimizer steps, loss {loss.item():.4f}, weight checksum {checksum:.8f}")  # fmt: skip
    return accelerator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=["fixed", "auto", "compare"], default="fixed")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=4, help="fixed mode: the micro-batch size")
    parser.add_argument("--gradient_accumulation_steps", type=int, default=4, help="fixed mode")
    parser.add_argument(
        "--target_batch_size", type=int, default=16, help="auto mode: samples per optimizer step"
    )
    parser.add_argument(
        "--max_fitting_batch", type=int, default=1024, help="pretend memory limit, in samples"
    )
    args = parser.parse_args()

    if args.mode == "compare":
        train(args, args.batch_size * args.gradient_accumulation_steps, 1, memory_limit=None)
    if args.mode in ("fixed", "compare"):
        accelerator = train(args, args.batch_size, args.gradient_accumulation_steps, args.max_fitting_batch)

    # Halving, not the default 10% step: the micro-batch must divide the target batch.
    @find_executable_batch_size(
        starting_batch_size=args.target_batch_size, reduce_batch_size_fn=lambda size: size // 2
    )
    def train_with_largest_batch(batch_size: int) -> Accelerator:
        if args.target_batch_size % batch_size:
            raise ValueError(
                f"--target_batch_size={args.target_batch_size} must be a power of two times a batch that fits"
            )
        return train(args, batch_size, args.target_batch_size // batch_size, args.max_fitting_batch)

    if args.mode in ("auto", "compare"):
        accelerator = train_with_largest_batch()
    # Once, after the last run: it ends the process group, which the runs before it shared.
    accelerator.end_training()


if __name__ == "__main__":
    main()
