"""Launched by tests/state/test_exit.py: a tiny DDP run whose process must exit cleanly.

``python exit_check.py MODE``: after one training step and a final ``gather_for_metrics`` (a
collective on tensors Python created, like the example's evaluation), the script
- ``end_training``: calls ``accelerator.end_training()`` and returns;
- ``return``: just returns (the prepared model dies with ``main()``);
- ``global``: keeps the prepared model in a module global, alive at exit.

Its own exit handler is registered before accelerate is imported, so it runs after accelerate's
teardown, just before the interpreter finalises: it prints the gloo threads still alive then.
"""

from __future__ import annotations

import atexit
import os
import sys


def _report_threads() -> None:
    tasks = "/proc/self/task"
    if not os.path.isdir(tasks):  # not Linux: nothing to inspect
        print(f"\nrank {os.environ.get('RANK')}: gloo threads at exit: [unknown]", flush=True)
        return
    names = []
    for tid in os.listdir(tasks):
        try:
            with open(f"{tasks}/{tid}/comm", encoding="utf-8") as file:
                names.append(file.read().strip())
        except OSError:  # the thread ended while being listed
            continue
    gloo = sorted(name for name in names if "gloo" in name)
    # On a line of its own, bracketed: the other rank writes to the same terminal.
    print(f"\nrank {os.environ.get('RANK')}: gloo threads at exit: [{','.join(gloo) or 'none'}]", flush=True)


atexit.register(_report_threads)

import torch  # noqa: E402 - after the exit handler on purpose (see the module docstring)

from accelerate import Accelerator  # noqa: E402

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
