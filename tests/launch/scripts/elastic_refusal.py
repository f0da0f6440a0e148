"""Launched by tests/launch/test_elastic_reshard.py: training on a stream (an iterable dataset).

    elastic_refusal.py PROJECT LOG [--save_at K]

Resumes with ``load_state(missing_ok=True)`` like an elastic script, then trains; ``--save_at K``
saves after step K and exits (the checkpoint the test then resumes from at another world size).
Every process appends ``start world W`` before the load and ``step N world W`` after each optimizer
step to LOG, so the test can tell whether any step ran after a load that failed.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, IterableDataset

from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, ProjectConfiguration


class Stream(IterableDataset):  # type: ignore[type-arg]
    """A stream without a length: its position cannot be re-split over another number of processes."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        gen = torch.Generator().manual_seed(0)
        for _ in range(32):
            yield torch.randn(4, generator=gen)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("project_dir")
    parser.add_argument("log")
    parser.add_argument("--save_at", type=int, default=0)
    args = parser.parse_args(argv)

    accelerator = Accelerator(
        project_config=ProjectConfiguration(project_dir=args.project_dir, automatic_checkpoint_naming=True),
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),
    )
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(Stream(), batch_size=2))
    world = accelerator.num_processes
    with open(args.log, "a") as log:
        log.write(f"start world {world}\n")
    accelerator.load_state(missing_ok=True)
    for step, batch in enumerate(loader, 1):
        accelerator.backward(model(batch).square().mean())
        optimizer.step()
        optimizer.zero_grad()
        with open(args.log, "a") as log:
            log.write(f"step {step} world {world}\n")
        if step == args.save_at:
            accelerator.save_state()
            break
    accelerator.end_training()


if __name__ == "__main__":
    main()
