"""Saves training state in a loop until killed; driven by test_crash.py.

Started once per test (importing torch is the slow part); for each trial it forks a child that
saves checkpoint after checkpoint, reporting each commit, until the test SIGKILLs it. Commands on
stdin: ``fork`` (answers ``pid N``) and ``reap N`` (answers ``reaped``). Lines go out with single
``os.write`` calls, which pipes keep whole.
"""

from __future__ import annotations

import os
import sys

import torch

from accelerate.checkpointing import checkpoint_dir, next_iteration, rotate_checkpoints, save_training_state
from accelerate.state import PartialState
from tests.checkpointing.harness import build, set_to, train

TOTAL_LIMIT = 2


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def save_forever(project: str) -> None:
    state = PartialState(cpu=True)
    bundle = build()
    train(bundle, 1)  # gives the optimizer and scaler some state
    bundle.scaler.scale(torch.ones(()))
    # As Accelerator.save_state does: folders beyond the limit that an earlier kill left between a
    # commit and its rotation go before the next save.
    rotate_checkpoints(project, TOTAL_LIMIT)
    i = next_iteration(project)
    while True:
        set_to(bundle, i)
        path = save_training_state(checkpoint_dir(project, i), state=state, step=i, **bundle.save_kwargs())
        say(f"committed {i}")
        rotate_checkpoints(project, TOTAL_LIMIT, keep=path)
        i += 1


def main(project: str) -> None:
    torch.set_num_threads(1)
    train(build(), 1)  # pay one-time import costs (the optimizer's first use) before forking
    say("ready")
    for line in sys.stdin:
        command, *args = line.split()
        if command == "fork":
            pid = os.fork()
            if pid == 0:
                try:
                    save_forever(project)
                finally:
                    os._exit(1)
            say(f"pid {pid}")
        elif command == "reap":
            os.waitpid(int(args[0]), 0)
            say("reaped")


if __name__ == "__main__":
    main(sys.argv[1])
