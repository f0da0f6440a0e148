"""Launched by tests/state/test_exit.py (through threads_at_exit.py): a tiny DDP run that must exit cleanly.

``python exit_check.py MODE``: after one training step and a final ``gather_for_metrics`` (a
collective on tensors Python created, like the example's evaluation), the script
- ``end_training``: calls ``accelerator.end_training()`` and returns;
- ``return``: just returns (the prepared model dies with ``main()``);
- ``global``: keeps the prepared model in a module global, alive at exit.
"""

from __future__ import annotations

import sys

import torch

from accelerate import Accelerator

KEPT: list[torch.nn.Module] = []


def main(mode: str) -> None:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    features = torch.randn(4, 8)
    accelerator.backward(model(features).sum())
    optimizer.step()
    with torch.no_grad():
        predictions = model(features).argmax(dim=-1)
    gathered = accelerator.gather_for_metrics(predictions)
    accelerator.print(f"gathered {gathered.numel()} predictions")
    if mode == "end_training":
        accelerator.end_training()
    elif mode == "global":
        KEPT.append(model)
    elif mode != "return":
        raise SystemExit(f"exit_check.py: unknown mode {mode!r}; use end_training, return or global")


if __name__ == "__main__":
    main(sys.argv[1])
