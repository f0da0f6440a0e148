"""Running a command with a pseudo-terminal as its stdin, stdout and stderr (as in a user's shell).

Output to a terminal is line-buffered and progress bars redraw, which changes the timing of a
process's last moments; issue 19's abort at exit showed up in a terminal and rarely otherwise.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence


def run_in_terminal(
    cmd: Sequence[str], *, env: Mapping[str, str], cwd: str, timeout: float
) -> tuple[int, str]:
    """Runs ``cmd`` attached to a new pseudo-terminal; returns its exit code and everything it wrote.

    A command still running after ``timeout`` seconds is killed with its whole process group and
    reported as exit code -9, its output so far included.
    """
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            list(cmd), env=dict(env), cwd=cwd, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
    finally:
        os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                chunks.append(f"\n[killed after {timeout:.0f}s]\n".encode())
                return -9, b"".join(chunks).decode(errors="replace")
            ready, _, _ = select.select([master], [], [], min(remaining, 1.0))
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every process holding the terminal has closed it
                break
            if not data:
                break
            chunks.append(data)
        return proc.wait(timeout=max(deadline - time.monotonic(), 1.0)), b"".join(chunks).decode(
            errors="replace"
        )
    finally:
        os.close(master)
