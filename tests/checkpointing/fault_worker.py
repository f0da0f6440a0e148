"""Kills a saving process just before its N-th rename or removal, for every N; see test_crash_safety.py.

``python -m tests.checkpointing.fault_worker ROOT SCENARIO...`` imports torch once, then for each
scenario and N = 1, 2, ... forks a child that, in ``ROOT/SCENARIO/trial_N``, commits a checkpoint
at step 1 and then starts one at step 2 that SIGKILLs itself just before its N-th ``os.replace`` or
``shutil.rmtree``. A scenario ends with the first N the step-2 save outlives (every rename and
removal of the commit has then been a kill point). Prints ``SCENARIO N killed|completed`` per
trial. The parent does no checkpoint I/O itself, so every child forks from a process without
helper threads.

Scenarios: ``foreign`` (the folder holds the user's ``config.json``), ``replace`` (the folder holds
only the step-1 checkpoint).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import torch

from accelerate.checkpointing import save_training_state
from accelerate.state import PartialState
from tests.checkpointing.harness import Bundle, build, set_to, train

USER_FILE = "config.json"
USER_TEXT = '{"mine": true}'


def _kill_before(n: int) -> None:
    count = 0

    def wrap(real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            nonlocal count
            count += 1
            if count == n:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        return call

    os.replace = wrap(os.replace)
    shutil.rmtree = wrap(shutil.rmtree)


def trial(bundle: Bundle, target: Path, scenario: str, n: int) -> None:
    state = PartialState(cpu=True)
    target.mkdir(parents=True)
    if scenario == "foreign":
        (target / USER_FILE).write_text(USER_TEXT)
    for step in (1, 2):
        set_to(bundle, step)
        if step == 2:
            _kill_before(n)
        save_training_state(target, state=state, step=step, **bundle.save_kwargs())


def main(root: str, scenarios: list[str]) -> None:
    torch.set_num_threads(1)
    bundle = build()  # built and trained once, before forking: the children only save
    train(bundle, 1)
    bundle.scaler.scale(torch.ones(()))
    for scenario in scenarios:
        for n in range(1, 100):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    trial(bundle, Path(root) / scenario / f"trial_{n}", scenario, n)
                    code = 0
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
            outcome = "killed" if killed else "completed" if os.WEXITSTATUS(status) == 0 else "failed"
            print(f"{scenario} {n} {outcome}", flush=True)
            if not killed:
                break


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
