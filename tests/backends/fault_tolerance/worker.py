"""One process of a replica group of the chaos check (``chaos.py`` starts three groups): the five-line
loop, unchanged.

argv: out_dir group_id num_groups lighthouse role, where role is ``survivor``, ``victim`` (its last
process pauses after the forward of step KILL_STEP and writes ``victim_ready`` so the harness
SIGKILLs it mid-step) or ``restarted`` (the victim's replacement: it heals from a peer and rejoins).
A group of several processes runs under ``accelerate launch --num_processes N``; the victim's
launcher restarts the whole group after the kill, and its processes then run as ``restarted``.
Files are named ``{kind}_{group}_{rank}_{role}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

from accelerate import Accelerator, FaultToleranceKwargs
from tests.backends.fault_tolerance.problem import (
    KILL_STEP,
    loss_of,
    make_loader,
    make_model,
    make_optimizer,
    make_scheduler,
)


def _wait_for(path: Path, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.005)


def _write_atomically(path: Path, text: str) -> None:
    """The harness reads these files as soon as they exist: they never exist half-written."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    os.replace(partial, path)


def main() -> None:
    out, group, groups, lighthouse, role = (
        Path(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
        sys.argv[5],
    )
    settings = FaultToleranceKwargs(
        replica_group_id=group, num_replica_groups=groups, lighthouse_address=lighthouse,
        min_replicas=2, heartbeat_ms=50, timeout_s=20.0, quorum_timeout_s=30.0,
    )  # fmt: skip
    if role == "victim" and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0:
        role = "restarted"  # the launcher restarted the victim's group
    accelerator = Accelerator(cpu=True, kwargs_handlers=[settings])
    rank, size = accelerator.process_index, accelerator.num_processes
    name = f"{group}_{rank}_{role}"
    model = make_model()
    optimizer = make_optimizer(model)
    model, optimizer, scheduler, loader = accelerator.prepare(
        model, optimizer, make_scheduler(optimizer), make_loader()
    )
    runtime = accelerator.strategy.runtime  # the test reads what each step drew and committed
    steps = out / f"steps_{name}.jsonl"
    # "started" means heartbeating: the lighthouse then waits (its join timeout) for this group's
    # quorum request. Written after prepare() alone, it let the others' first quorum form without a
    # group still building its manager (lazily, at its first step), which then joined healed, past
    # the kill step, and was never killed (or a restarted group missed the run's end).
    runtime.connect()
    _write_atomically(out / f"started_{name}", str(os.getpid()))
    if role != "restarted":  # start together, so the first quorum has every group (the kill step then has 3)
        for other in range(groups):
            _wait_for(
                out / f"started_{other}_0_{'victim' if other == group_of_victim(groups) else 'survivor'}"
            )
    with steps.open("w") as log:
        for batch in loader:
            loss = loss_of(model, batch)
            if role == "victim" and rank == size - 1 and runtime.manager.current_step() == KILL_STEP:
                _write_atomically(out / "victim_ready", str(os.getpid()))
                time.sleep(600)  # SIGKILLed here, mid-step
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            record = runtime.records[-1].as_dict()
            record["pid"], record["time"] = os.getpid(), time.time()
            log.write(json.dumps(record) + "\n")
            log.flush()
            if (
                role == "survivor"
                and record["committed"]
                and record["participants"] < groups
                and (out / "victim_ready").exists()
            ):
                # Down a group: wait until its replacement heartbeats (the next quorum then waits for
                # it), so the run cannot end before it rejoins (the harness restarts it once this step is logged).
                _wait_for(out / f"started_{group_of_victim(groups)}_0_restarted")
    unwrapped = accelerator.unwrap_model(model)
    # FSDP2 inside the group: gather each parameter (a collective of the group, on every process)
    full = {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in unwrapped.state_dict().items()}
    torch.save({k: v.detach().clone() for k, v in full.items()}, out / f"params_{name}.pt")
    heal_s = runtime.last_heal_s
    (out / f"heal_{name}.json").write_text(
        json.dumps({"heal_s": heal_s, "sharded": runtime.sharded, "lr": scheduler.get_last_lr()[0]})
    )
    accelerator.strategy.release()


def group_of_victim(groups: int) -> int:
    return 1 if groups > 1 else 0


if __name__ == "__main__":
    main()
