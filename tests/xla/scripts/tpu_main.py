"""Launched by tests/xla/test_launch.py with `accelerate launch --tpu`: imported, then main() is called."""

import argparse
import sys

import torch

from accelerate import Accelerator


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for _ in range(args.steps):
        optimizer.zero_grad()
        accelerator.backward(model(torch.ones(3, 2, device=accelerator.device)).sum())
        optimizer.step()
    mp = accelerator.mixed_precision
    print(
        f"XLA-RUN {accelerator.distributed_type.value} {accelerator.device} {accelerator.num_processes} {args.steps} {mp}"
    )


def other_entry() -> None:
    print("OTHER-ENTRY", sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit("a TPU launch imports this script and calls main(); it must not run it as __main__")
