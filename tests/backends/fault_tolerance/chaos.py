"""The fault-tolerance chaos check: 3 replica groups, one SIGKILLed mid-step, restarted and healed.

``python -m tests.backends.fault_tolerance.chaos OUT_DIR [GROUP_SIZES [fsdp]]`` runs it and writes
``OUT_DIR/summary.json`` (what the test asserts and the bench reports). The kill is timed by a file
the victim writes after its forward, the restart by the survivors' step log: no fixed sleeps.

With GROUP_SIZE 1 (the default) each group is one process the harness starts, and restarts after
the kill. With GROUP_SIZE 2 each group is ``accelerate launch --num_processes 2 --fault_tolerance``
(DDP inside the group); the harness SIGKILLs one process of the victim's group, and that group's
launcher (``--max_restarts 1``) tears the group down and restarts it. GROUP_SIZES may also name each
group's size, ``1,2,2``: DDP groups of different sizes (each meets the others through its rank 0).
``fsdp``: FSDP2 inside each group instead of DDP (``--use_fsdp --fsdp_version 2``; each process
exchanges and heals its shard).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from accelerate.backends.fault_tolerance.manager import lighthouse_address, start_lighthouse
from tests.backends.fault_tolerance.problem import (
    BATCH_SIZE,
    NUM_SAMPLES,
    loss_of,
    make_dataset,
    make_model,
    make_optimizer,
    make_scheduler,
)

ROOT = Path(__file__).resolve().parents[3]
GROUPS, VICTIM = 3, 1
LIMIT_S = 90.0


def _spawn(
    out: Path, group: int, lighthouse: str, role: str, size: int, fsdp: bool = False, groups: int = GROUPS
) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}")
    log = (out / f"log_{group}_{role}.txt").open("wb")
    worker = ["tests.backends.fault_tolerance.worker", str(out), str(group), str(groups), lighthouse, role]
    if size == 1:
        command = [sys.executable, "-m", *worker]
    else:
        # The group's own launcher; only the victim's may restart its group (after the kill).
        restarts = "1" if role == "victim" else "0"
        command = [
            sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--cpu",
            "--num_processes", str(size), "--main_process_port", "0", "--max_restarts", restarts, "--fault_tolerance",
            "--ft_lighthouse", lighthouse, *(["--use_fsdp", "--fsdp_version", "2"] if fsdp else []),
            "-m", *worker,
        ]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def _pids(out: Path, group: int, role: str, size: int) -> list[int]:
    return [int((out / f"started_{group}_{rank}_{role}").read_text()) for rank in range(size)]


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _until(condition: Any, what: str, processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + LIMIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"chaos check: {what} did not happen within {LIMIT_S} s")
        for process in processes:
            if process.poll() not in (None, 0):
                raise RuntimeError(
                    f"chaos check: a worker failed (exit {process.returncode}) while waiting for {what}"
                )
        time.sleep(0.002)


def listening_addresses(pids: list[int]) -> set[str]:
    """The local addresses the processes ``pids`` listen on (TCP, from /proc; Linux only)."""
    inodes: set[str] = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd) if fd.is_symlink() else ""
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pids[0]}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address = fields[1].split(":")[0]
                found.add(
                    ".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0))
                    if table == "tcp"
                    else address
                )
    return found


def reference(
    committed: list[dict[str, Any]], start: dict[str, torch.Tensor] | None = None
) -> tuple[dict[str, torch.Tensor], float]:
    """One process training the batches the committed steps trained, with no failure; its last LR.

    The schedule is the one-process run's, one step per batch: a committed step of ``c`` real
    batches advances it ``c`` times (the LR is a function of the batches trained). ``start``: the
    weights the run started from, when not ``make_model()``'s (test_hsdp.py).
    """
    model = make_model()
    if start is not None:
        model.load_state_dict(start)
    optimizer = make_optimizer(model)
    scheduler = make_scheduler(optimizer)
    dataset = make_dataset()
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0)).tolist()
    for step in committed:
        optimizer.zero_grad()
        for b in range(step["position"], step["position"] + step["contributors"]):
            x, y = dataset[order[b * BATCH_SIZE : (b + 1) * BATCH_SIZE]]
            (loss_of(model, [x, y]) / step["contributors"]).backward()
        optimizer.step()
        for _ in range(step["contributors"]):
            scheduler.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, scheduler.get_last_lr()[0]


def group_sizes(spec: int | str) -> list[int]:
    """``2`` -> every group of 2 processes; ``"1,2,2"`` -> each group's own size."""
    sizes = [int(part) for part in str(spec).split(",")]
    return sizes * GROUPS if len(sizes) == 1 else sizes


def run(out: Path, size: int | str = 1, fsdp: bool = False, join_timeout_ms: int = 2000) -> dict[str, Any]:
    """The check; ``join_timeout_ms``: how long a quorum waits for a live group that has not asked yet.

    The check's default (2 s) makes the first quorum wait for a group that asks late on a loaded
    machine (else it may miss the steps before the kill), and the restarted group's first one too.
    The lighthouse waits only for a live (heartbeating) group, so each worker connects its manager
    before it writes its ``started`` file (``worker.py``); a dead group stops counting as live after
    the 500 ms heartbeat timeout, so the survivors wait at most that long. The bench passes start_lighthouse's default, 100 ms, which the kill-to-commit time reflects.
    """
    sizes = group_sizes(size)
    if len(sizes) != GROUPS:
        raise ValueError(f"chaos check: {size!r} names {len(sizes)} group sizes for {GROUPS} groups.")
    victim_size = sizes[VICTIM]
    out.mkdir(parents=True, exist_ok=True)
    server = start_lighthouse(
        "127.0.0.1:0", min_replicas=2, heartbeat_timeout_ms=500, join_timeout_ms=join_timeout_ms
    )
    lighthouse = lighthouse_address(server, "127.0.0.1")
    processes = {
        g: _spawn(out, g, lighthouse, "victim" if g == VICTIM else "survivor", sizes[g], fsdp)
        for g in range(GROUPS)
    }
    everyone = list(processes.values())
    survivors = [g for g in range(GROUPS) if g != VICTIM]
    try:
        _until(lambda: (out / "victim_ready").exists(), "the victim reaching its kill step", everyone)
        # Every server the groups' processes opened (manager, gloo, rendezvous store) listens on loopback only.
        workers = [
            pid
            for g in range(GROUPS)
            for pid in _pids(out, g, "victim" if g == VICTIM else "survivor", sizes[g])
        ]
        listeners = listening_addresses(workers) if sys.platform == "linux" else None
        victim_pid = int((out / "victim_ready").read_text())
        os.kill(victim_pid, signal.SIGKILL)  # one process of the victim's group, mid-step
        killed_at = time.time()
        # The reference below builds the first optimizer of this process, which imports torch._dynamo
        # (about 1 s of CPU): import it now, while the survivors wait out the dead group's heartbeat
        # and the restarted group starts, instead of after every group has ended.
        warm = threading.Thread(target=importlib.import_module, args=("torch._dynamo",), daemon=True)
        warm.start()
        if victim_size == 1:
            processes[VICTIM].wait()
            everyone.remove(processes[VICTIM])
        first = out / f"steps_{survivors[0]}_0_survivor.jsonl"

        def commits_without_it() -> list[float]:
            return [
                r["time"] for r in _records(first)
                if r["committed"] and r["participants"] == GROUPS - 1 and r["time"] > killed_at
            ]  # fmt: skip

        _until(commits_without_it, "a survivor committing a step without the victim", everyone)
        next_commit = min(commits_without_it())
        # One process: the harness restarts the group; several: the group's launcher already does.
        restarted = _spawn(out, VICTIM, lighthouse, "restarted", 1) if victim_size == 1 else processes[VICTIM]
        if victim_size == 1:
            everyone.append(restarted)
        for process in [*(processes[g] for g in survivors), restarted]:
            process.wait(timeout=LIMIT_S)
            if process.returncode != 0:
                raise RuntimeError(
                    f"chaos check: a worker exited with {process.returncode}; see {out}/log_*.txt"
                )
    finally:
        for process in everyone:
            if process.poll() is None:
                process.kill()
        server.shutdown()

    ranks = range(victim_size)
    logs = {
        (g, r): _records(out / f"steps_{g}_{r}_survivor.jsonl") for g in survivors for r in range(sizes[g])
    }
    logs.update({(VICTIM, r): _records(out / f"steps_{VICTIM}_{r}_restarted.jsonl") for r in ranks})
    victim_logs = [_records(out / f"steps_{VICTIM}_{r}_victim.jsonl") for r in ranks]
    victim_log = victim_logs[-1]  # the process that was killed
    params = {
        (g, r): torch.load(out / f"params_{g}_{r}_{'restarted' if g == VICTIM else 'survivor'}.pt")
        for g in range(GROUPS) for r in range(sizes[g])
    }  # fmt: skip
    # Every committed step as the groups logged it (a group that joined late missed the first ones).
    by_step: dict[int, dict[str, Any]] = {}
    for record in [r for log in [*logs.values(), *victim_logs] for r in log if r["committed"]]:
        seen = by_step.setdefault(record["step"], record)
        if (seen["position"], seen["contributors"]) != (record["position"], record["contributors"]):
            raise AssertionError(f"groups disagree on what step {record['step']} trained: {seen} vs {record}")
    committed = [by_step[step] for step in sorted(by_step)]
    if [r["step"] for r in committed] != list(range(len(committed))):
        raise AssertionError(f"committed steps are not 0..n-1: {sorted(by_step)}")
    warm.join()
    expected, expected_lr = reference(committed)
    trained: dict[int, int] = {}
    for step in committed:
        for b in range(step["position"], step["position"] + step["contributors"]):
            trained[b] = trained.get(b, 0) + 1
    heals = [json.loads((out / f"heal_{VICTIM}_{r}_restarted.json").read_text()) for r in ranks]
    heal_s = [heal["heal_s"] for heal in heals]
    # every process's last LR (the restarted group's healed with its scheduler), against the reference's
    last_lrs = [
        json.loads((out / f"heal_{g}_{r}_{'restarted' if g == VICTIM else 'survivor'}.json").read_text())["lr"]
        for g in range(GROUPS) for r in range(sizes[g])
    ]  # fmt: skip
    survivor_log = logs[(survivors[0], 0)]
    restarted_log = logs[(VICTIM, 0)]
    survivor_pids = {
        (g, r): _pids(out, g, "survivor", sizes[g])[r] for g in survivors for r in range(sizes[g])
    }
    survivor_pids.update({(g, 0): processes[g].pid for g in survivors if sizes[g] == 1})
    summary = {
        "group_size": victim_size,
        "group_sizes": sizes,
        "fsdp": fsdp,
        "sharded": [heal["sharded"] for heal in heals],  # FSDP2 inside the restarted group, per process
        "listen_addresses": sorted(listeners) if listeners is not None else None,
        "survivor_pids_unchanged": all(
            {r["pid"] for r in logs[key]} == {pid} for key, pid in survivor_pids.items()
        ),
        "skipped_steps": [r["step"] for r in survivor_log if not r["committed"]],
        # the victim logged every step before the one it died in (it may have joined at step 1, healed)
        "victim_last_step": max((r["step"] for r in victim_log), default=None),
        # the killed step's batches went back to the pool: the next committed step drew from the same position
        "killed_step_redrawn": [
            (r["position"], next(c["position"] for c in survivor_log[i:] if c["committed"]))
            for i, r in enumerate(survivor_log)
            if not r["committed"]
        ],
        "restarted_first_step": restarted_log[0]["step"] if restarted_log else None,
        "restarted_committed_with_all": sum(
            1 for r in restarted_log if r["committed"] and r["participants"] == GROUPS
        ),
        "groups_equal": all(
            torch.equal(params[key][k], params[(0, 0)][k]) for key in params for k in params[(0, 0)]
        ),
        "max_diff_to_reference": max(float((params[(0, 0)][k] - expected[k]).abs().max()) for k in expected),
        "batches": NUM_SAMPLES // BATCH_SIZE,
        "each_batch_once": sorted(trained) == list(range(NUM_SAMPLES // BATCH_SIZE))
        and set(trained.values()) == {1},
        "max_lr_diff_to_reference": max(abs(lr - expected_lr) for lr in last_lrs),
        "kill_to_next_commit_s": next_commit - killed_at,
        "heal_s": max(heal_s) if None not in heal_s else None,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def problems_in(summary: dict[str, Any], group_size: int | str, inside: str) -> list[str]:
    """What a run's summary shows went wrong (empty: nothing); the test and ``make chaos`` both ask."""
    from tests.backends.fault_tolerance.problem import KILL_STEP

    sizes = group_sizes(group_size)
    checks = {
        "the group sizes asked for": summary["group_sizes"] == sizes,
        "FSDP2 inside the group when asked": summary["sharded"] == [inside == "fsdp"] * sizes[VICTIM],
        "survivors kept their processes": summary["survivor_pids_unchanged"],
        "servers bound to 127.0.0.1 only": summary["listen_addresses"] in (None, ["127.0.0.1"]),
        "the victim logged every step before the kill": summary["victim_last_step"] == KILL_STEP - 1,
        "the kill step was skipped, not half-applied": summary["skipped_steps"][:1] == [KILL_STEP],
        "the skipped step's batches were drawn again": all(
            before == after for before, after in summary["killed_step_redrawn"]
        ),
        "the restarted group healed to the live step": (summary["restarted_first_step"] or 0) > KILL_STEP,
        "the restarted group trained again with every group": summary["restarted_committed_with_all"] > 0,
        "every group ended with equal parameters": summary["groups_equal"],
        "every batch was trained exactly once": summary["each_batch_once"],
        "the parameters equal the reference's (1e-5)": summary["max_diff_to_reference"] < 1e-5,
        "the restarted group healed from a peer": summary["heal_s"] is not None,
        "the LR is the reference's after the same batches": summary["max_lr_diff_to_reference"] < 1e-9,
    }
    return [f"not so: {what} ({summary})" for what, ok in checks.items() if not ok]


if __name__ == "__main__":
    spec = sys.argv[2] if len(sys.argv) > 2 else "1"
    print(json.dumps(run(Path(sys.argv[1]), spec, fsdp="fsdp" in sys.argv[3:]), indent=1), flush=True)
    # The summary is written, every worker has ended and the lighthouse is shut down: end without the
    # interpreter's teardown of torch and torchft (0.5 s of CPU per process, several seconds of wall
    # on a busy 2-core machine), which is the harness's own and no check looks at.
    sys.stderr.flush()
    os._exit(0)
