"""A script for the async-save tests that need a process of their own (SIGKILL, exit).

``python -m tests.checkpointing.async_worker MODE PROJECT``:

* ``kill``: commits checkpoint_0 synchronously, then starts an async save whose writer stalls
  inside ``torch.save`` (a registered object's state pickles slowly); prints ``returned`` when
  ``save_state`` returned and ``writing`` when the writer is inside the file, then waits to be killed.
* ``exit``: starts an async save whose writer takes a second, prints ``returned`` and ends the
  script at once: the interpreter's exit must wait for the commit.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from typing import Any

import torch

from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


class Slow:
    """Pickles after ``seconds`` (announcing it): a writer thread that is visibly mid-file."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __deepcopy__(self, memo: dict[int, Any]) -> Slow:
        return self  # immutable for the test's purpose: the snapshot may share it

    def __reduce__(self) -> tuple[Any, ...]:
        say("writing")
        time.sleep(self.seconds)
        return (collections.OrderedDict, ())


class Holder:
    """A registered object whose state includes a Slow value once armed."""

    def __init__(self) -> None:
        self.slow: Slow | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"value": 1} if self.slow is None else {"value": 2, "slow": self.slow}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def main(mode: str, project: str) -> None:
    torch.set_num_threads(1)
    config = ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True)
    accelerator = Accelerator(cpu=True, project_config=config)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    model(torch.randn(2, 64)).sum().backward()
    optimizer.step()
    holder = Holder()
    accelerator.register_for_checkpointing(holder)
    if mode == "kill":
        accelerator.save_state()  # checkpoint_0, committed
        holder.slow = Slow(600.0)
    else:
        holder.slow = Slow(1.0)
    accelerator.save_state(async_save=True)
    say("returned")
    if mode == "kill":
        time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
