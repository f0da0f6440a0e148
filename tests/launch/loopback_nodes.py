"""Elastic "nodes" on loopback for the tests: each node is one ``accelerate launch`` in its own session.

Killing a node's session (``os.killpg``) kills its launcher at once, like a machine going away; its
workers, which torch's agent starts in sessions of their own, then end through the bootstrap's
parent watch (launch/bootstrap.py). Every process of a test's nodes carries ``ELASTIC_RUN=<token>``
in its environment, so :func:`leftover_processes` finds any that outlived the run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.commands.helpers import accelerate_cmd, cli_env

SCRIPT = str(Path(__file__).resolve().parent / "scripts" / "elastic_train.py")


@dataclass
class Node:
    """A node's launcher and its console, kept in files: eight nodes' pipes nobody reads would fill."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def finish(self, timeout: float) -> int:
        """Its exit status, once it ended by itself within ``timeout`` seconds."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"node {self.name} still running after {timeout}s:\n{self.output()}"
            ) from None


def start_node(
    name: str, port: int, home: Path, script_args: list[str], *, nnodes: str, num_processes: int,
    rdzv_conf: str, token: str,
) -> Node:  # fmt: skip
    """One node: ``accelerate launch --nnodes MIN:MAX`` of the elastic script, named ``name``.

    Node ``a`` hosts the c10d store (``is_host=1``); every other node is told it is a client
    (``is_host=0``), whose store connection retries until the host listens, so a test starts all its
    nodes at once (on loopback each would otherwise bind the port itself if it came first). The
    rendezvous numbers the nodes; a rank > 0 only says "not the one hosting the store". Its stdout
    and stderr go to HOME/node-NAME.log.
    """
    command = accelerate_cmd(
        "launch", "--cpu", "--num_processes", str(num_processes), "--nnodes", nnodes, "--rdzv_backend", "c10d",
        "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_conf", f"{rdzv_conf},is_host={int(name == 'a')}",
        "--max_restarts", "3", "--monitor_interval", "0.2",
        "--machine_rank", "0" if name == "a" else "1", SCRIPT, *script_args,
    )  # fmt: skip
    log = home / f"node-{name}.log"
    with log.open("wb") as console:
        proc = subprocess.Popen(
            command, env=cli_env(home, ELASTIC_NODE=name, ELASTIC_RUN=token), stdout=console,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    return Node(name, proc, log)


def wait_for(paths: list[Path], nodes: list[Node], what: str, timeout: float) -> None:
    """Until every path exists; fails at once when a node ends, with what it printed."""
    deadline = time.monotonic() + timeout
    while not all(path.exists() for path in paths):
        for node in nodes:
            if node.proc.poll() is not None:
                raise AssertionError(
                    f"node {node.name} ended before {what}: {node.proc.returncode}\n{node.output()}"
                )
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout}s")
        time.sleep(0.05)


def kill_node(node: Node) -> None:
    os.killpg(node.proc.pid, signal.SIGKILL)
    node.proc.wait()


def kill_running(nodes: list[Node]) -> None:
    for node in nodes:
        if node.proc.poll() is None:
            kill_node(node)


def epoch_records(ids_dir: Path) -> dict[int, list[int]]:
    """step -> sample ids of its last attempt (a phase that resumed from step S supersedes steps > S).

    The processes of one phase (same resume step and world size) add up; a later phase drops what
    earlier phases trained after its checkpoint (those steps were lost and are trained again).
    """
    steps: dict[int, tuple[str, list[int]]] = {}
    for path in sorted(ids_dir.glob("*.txt"), key=lambda p: int(p.name.split("-")[0])):
        lines = path.read_text().splitlines()
        phase, resumed = lines[0], int(lines[0].split()[1])
        for step in [s for s, (owner, _) in steps.items() if s > resumed and owner != phase]:
            del steps[step]
        for line in lines[1:]:
            step, index = (int(v) for v in line.split())
            steps.setdefault(step, (phase, []))[1].append(index)
    return {step: ids for step, (_, ids) in sorted(steps.items())}


def check_epoch(ids_dir: Path, length: int) -> dict[int, list[int]]:
    """The epoch's steps (last attempts); every sample of the epoch in them exactly once."""
    steps = epoch_records(ids_dir)
    seen = [i for ids in steps.values() for i in ids]
    assert sorted(seen) == list(range(length)), f"repeated or skipped samples: {sorted(seen)}"
    return steps


def leftover_processes(token: str) -> list[str]:
    """The processes (pid and command line) still running with ``ELASTIC_RUN=token`` in their environment."""
    marker = f"ELASTIC_RUN={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{entry.name}: {command}")
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def wait_no_leftovers(token: str, timeout: float) -> None:
    """Orphans must end on their own (the bootstrap's parent watch); a zombie still has an environ."""
    deadline = time.monotonic() + timeout
    while (left := leftover_processes(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes outlived their node's launcher after {timeout}s: {left}"
