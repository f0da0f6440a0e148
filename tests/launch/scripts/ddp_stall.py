"""A DDP job in which rank 1 stalls before its backward (launched by tests/launch/test_hang_diagnosis.py).

Usage: ddp_stall.py TIMEOUT_S. One full training step that everyone makes; in the second, rank 0
enters ``accelerator.backward`` (DDP's gradient all-reduce) while rank 1 sits in
``stuck_before_backward()``.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import torch

from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs


def stuck_before_backward() -> None:
    while True:
        time.sleep(0.2)


def main() -> None:
    timeout = float(sys.argv[1])
    accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=timeout))])
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for step in range(2):
        loss = model(torch.ones(4, 3)).sum()
        if step == 1 and accelerator.process_index == 1:
            stuck_before_backward()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    print("unreachable: the gradient all-reduce did not hang", flush=True)


if __name__ == "__main__":
    main()
