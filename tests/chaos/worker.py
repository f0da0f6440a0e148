"""What each launched process runs in a chaos run: fault hooks around an unchanged training script.

    accelerate launch ... tests/chaos/worker.py --plan PLAN.json --events DIR [--out FINAL.pt] -- SCRIPT ARGS...

It installs two hooks, then runs SCRIPT (the bundled example) exactly as ``python SCRIPT ARGS`` would:

- a global optimizer-step hook (torch's ``register_optimizer_step_post_hook``): after every optimizer
  step it reads the step number from the optimizer's own state (``state[param]["step"]``, which
  ``load_state`` restores, so it counts across restarts) and looks the step up in the plan. A fault
  planned for this rank and step that has not fired yet (``DIR/fired_<id>.json`` does not exist)
  fires: the hook writes that file (this process's pid, its parent's, the time) and, for a fault the
  runner delivers from outside (a signal to this process or to its launcher), waits there to be
  killed or stopped. Faults therefore land at step boundaries chosen by the seed, never after a sleep.
- a write hook on ``os.write`` (the system call our storage code writes checkpoint files with),
  armed by a ``disk_full`` or ``kill_in_save`` fault for the save that follows its step: the first
  write to the planned file raises ``OSError(ENOSPC)`` as a full disk would, or announces itself
  and waits mid-file for the runner's SIGKILL. Nothing of accelerate is replaced. When the runner
  made the project folder a small tmpfs (``CHAOS_BALLAST`` names a file on it), a ``disk_full``
  fault fills that file system for real instead, and the next start of the processes empties it.

Rank 0 appends one line per optimizer step to ``DIR/progress.log`` (step, time, launch, restart
attempt, pid): the runner reads which step each attempt resumed from and how long each fault cost.
At the end rank 0 saves the parameters and the optimizer's state to ``--out`` for the comparison with
an uninterrupted run. Only the standard library and torch are imported here.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import runpy
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

# How long a process that announced an outside fault waits for it: the runner acts within a second;
# past this the runner is gone, and the process fails loudly instead of waiting forever.
_WAIT_FOR_RUNNER_S = 120.0


class Faults:
    def __init__(self, plan: list[dict[str, Any]], events: Path, rank: int) -> None:
        self.events = events
        self.rank = rank
        self.mine = [fault for fault in plan if int(fault["rank"]) == rank]
        self.last_step = -1
        self.armed: dict[str, Any] | None = None  # the write fault waiting for its file
        self.optimizer: torch.optim.Optimizer | None = None
        self.progress = events / "progress.log" if rank == 0 else None
        self._in_hook = threading.local()
        # Set when the project folder is a small tmpfs of the runner's: a disk_full fault then fills
        # it for real (this file), and the next start of the processes empties it again.
        ballast = os.environ.get("CHAOS_BALLAST")
        self.ballast = Path(ballast) if ballast else None

    def fired(self, fault: dict[str, Any]) -> bool:
        return (self.events / f"fired_{fault['id']}.json").exists()

    def announce(self, fault: dict[str, Any], step: int, mode: str = "") -> None:
        record = {
            "id": fault["id"],
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "step": step,
            "time": time.time(),
            "mode": mode,
        }
        tmp = self.events / f".fired_{fault['id']}.tmp"
        tmp.write_text(json.dumps(record))
        tmp.replace(self.events / f"fired_{fault['id']}.json")  # whole or absent for the runner

    def wait_for_runner(self, fault: dict[str, Any]) -> None:
        deadline = time.monotonic() + _WAIT_FOR_RUNNER_S
        while time.monotonic() < deadline:
            time.sleep(0.05)
        raise RuntimeError(f"chaos worker: fault {fault['id']} ({fault['kind']}) was never delivered")

    def after_step(self, optimizer: torch.optim.Optimizer, _args: Any, _kwargs: Any) -> None:
        step = _optimizer_step(optimizer)
        if step is None or step == self.last_step:
            return  # the wrapper's step and the inner optimizer's both call global hooks
        self.last_step = step
        self.optimizer = optimizer
        if self.progress is not None:
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            launch = os.environ.get("CHAOS_LAUNCH", "0")
            with open(self.progress, "a", encoding="utf-8") as log:
                log.write(f"{step} {time.time():.3f} {launch} {attempt} {os.getpid()}\n")
        for fault in self.mine:
            if int(fault["step"]) != step or self.fired(fault):
                continue
            if fault["kind"] == "disk_full" and self.ballast is not None:
                self.announce(fault, step, mode="tmpfs filled")
                _fill(self.ballast)  # the save after this step finds no room left
                continue
            if fault["kind"] in ("disk_full", "kill_in_save"):
                self.armed = fault  # the save after this step meets it
                continue
            self.announce(fault, step)
            self.wait_for_runner(fault)

    def write(self, real: Any, fd: int, data: Any) -> int:
        fault = self.armed
        if fault is None or getattr(self._in_hook, "active", False):
            return int(real(fd, data))
        try:
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            name = ""
        if name != fault["file"]:
            return int(real(fd, data))
        self.armed = None
        self._in_hook.active = True
        self.announce(fault, self.last_step, mode="ENOSPC raised by the write hook")
        if fault["kind"] == "disk_full":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.wait_for_runner(fault)  # kill_in_save: SIGKILLed mid-file by the runner
        return 0


def _fill(ballast: Path) -> None:
    """Writes ``ballast`` until its file system has no byte left (ENOSPC from the kernel itself)."""
    chunk = 1 << 20
    with open(ballast, "ab", buffering=0) as file:
        while chunk >= 512:
            try:
                file.write(b"\0" * chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                chunk //= 2


def _optimizer_step(optimizer: torch.optim.Optimizer) -> int | None:
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param)
            if state and "step" in state:
                return int(state["step"])
    return None


def _save_final(faults: Faults, out: str) -> None:
    optimizer = faults.optimizer
    if optimizer is None:
        raise RuntimeError("chaos worker: the script never stepped an optimizer")
    params = [p.detach().clone() for group in optimizer.param_groups for p in group["params"]]
    state = {k: v for k, v in optimizer.state_dict()["state"].items()}
    torch.save({"step": faults.last_step, "params": params, "optimizer": state}, out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", required=True)
    parser.add_argument("--events", required=True)
    parser.add_argument("--out", default=None)
    parser.add_argument("script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    events = Path(args.events)
    faults = Faults(json.loads(Path(args.plan).read_text()), events, rank)
    (events / f"pid_{rank}_{os.getpid()}").touch()  # the runner finds a stalled rank's peer by it
    if faults.ballast is not None:
        # The processes that met the full disk are gone (the agent restarts a group only then): room
        # again, as after an operator cleaned up.
        faults.ballast.unlink(missing_ok=True)
    register_optimizer_step_post_hook(faults.after_step)
    real_write = os.write
    os.write = lambda fd, data: faults.write(real_write, fd, data)  # type: ignore[assignment]
    sys.argv = [args.script, *args.script_args]
    sys.path[0] = os.path.dirname(os.path.abspath(args.script))
    runpy.run_path(args.script, run_name="__main__")
    if rank == 0 and args.out is not None:
        _save_final(faults, args.out)


if __name__ == "__main__":
    main()
