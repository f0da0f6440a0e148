"""Two "nodes" on one box: lose one mid-epoch, keep training on the survivor, let a replacement join.

    make demo-multinode        (or: python examples/multinode_demo.py)

Each node is its own `accelerate launch --nnodes 1:2` process on loopback (one training process
each), running the bundled examples/train_classifier.py (unchanged; with its ``--checkpoint_dir`` option, so it
saves every 100 steps and starts from the newest checkpoint). Node a hosts the rendezvous.
Once training runs on 2 processes, node b is killed (its launcher and its process, like a machine
that lost power); torch's elastic agent on node a re-forms the group at world size 1 and the script
starts again there, resuming from the newest checkpoint (mid-epoch, the data position translated to
the new world size). Once that runs, node c joins: the group re-forms at world size 2, resumes again
and trains to the end. The demo prints what each node's launcher said about membership and where the
script continued, then the final accuracy.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = str(REPO / "examples" / "train_classifier.py")
# Enough work that a node can be killed mid-epoch (a few seconds per epoch on a laptop core).
EXAMPLE_ARGS = ["--epochs", "2", "--train_samples", "120000", "--batch_size", "16"]
# Checkpoints every 100 optimizer steps in a fresh folder: each re-formed group continues from the newest.
CHECKPOINTS = tempfile.mkdtemp(prefix="accelerate-demo-multinode-")
SHOWN = ("membership", "Training on", "Continuing at", "accuracy", "resumed from", "restarting every process", "  1.", "  2.",
         "  3.")  # fmt: skip


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


class Node:
    """One launcher process; its output lines are kept and the interesting ones printed as they come."""

    def __init__(self, name: str, port: int, rank: int) -> None:
        self.name = name
        self.lines: list[str] = []
        command = [
            sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--cpu", "--num_processes", "2",
            "--nnodes", "1:2", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
            # A short last call and heartbeat: the survivors re-form seconds after a death (torch's
            # defaults wait 30 s for late nodes and 15 s for a dead one's heartbeats to lapse).
            "--rdzv_conf", "last_call_timeout=2,keep_alive_interval=1,keep_alive_max_attempt=3",
            "--max_restarts", "3", "--monitor_interval", "0.5",
            "--machine_rank", str(rank), EXAMPLE, *EXAMPLE_ARGS, "--checkpoint_dir", CHECKPOINTS,
        ]  # fmt: skip
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
        }
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            for line in raw.replace("\r", "\n").splitlines():
                self.lines.append(line)
                if any(key in line for key in SHOWN):
                    print(f"[node {self.name}] {line.strip()}", flush=True)

    def saw(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code


def _until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: no {what} within {timeout:.0f}s")
        time.sleep(0.1)


def main() -> int:
    port = _free_port()
    print(f"demo: node a (hosts the rendezvous on 127.0.0.1:{port}) and node b start", flush=True)
    a = Node("a", port, 0)
    _until(lambda: _listening(port), 60, "rendezvous store")
    b = Node("b", port, 1)
    nodes = [a, b]
    try:
        _until(lambda: a.saw("Training on 2") or b.saw("Training on 2"), 120, "training on 2 processes")
        time.sleep(2.0)  # mid-epoch
        print("demo: killing node b (its launcher and its training process)", flush=True)
        b.kill()
        _until(lambda: a.saw("Training on 1"), 120, "re-formed group of 1")
        time.sleep(2.0)
        print("demo: node c joins", flush=True)
        c = Node("c", port, 1)
        nodes.append(c)
        code_a, code_c = a.wait(600), c.wait(600)
    finally:
        for node in nodes:
            if node.proc.poll() is None:
                node.kill()
    print("\ndemo: membership log (node a's launcher):")
    for line in a.lines:
        if "membership" in line or line.startswith("  ") and ". node" in line:
            print(f"  {line.strip()}")
    final = [line for node in (a, c) for line in node.lines if "Final accuracy" in line]
    print(f"demo: {final[-1].strip() if final else 'no final accuracy printed'}")
    print(f"demo: node a exited with {code_a}, node c with {code_c}")
    return 0 if code_a == 0 and code_c == 0 and final else 1


if __name__ == "__main__":
    sys.exit(main())
