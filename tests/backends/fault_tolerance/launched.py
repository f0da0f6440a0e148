"""Replica groups started as real `accelerate launch` processes, one launcher per group, for the tests
that need several processes inside a group (the chaos harness has its own restarting runner)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def run_groups(launch_args: Sequence[Sequence[str]], *, server: Any, timeout: float) -> list[str]:
    """Runs ``accelerate launch --cpu --main_process_port 0 <args>`` once per group, side by side.

    Waits for every launcher, kills any left running (a test must not leave orphans), shuts the
    lighthouse down, and fails with each group's output tail unless every launcher exited 0.
    Returns the outputs.
    """
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}")
    base = [
        sys.executable,
        "-m",
        "accelerate.commands.accelerate_cli",
        "launch",
        "--cpu",
        "--main_process_port",
        "0",
    ]
    processes = [
        subprocess.Popen(
            [*base, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for args in launch_args
    ]
    try:
        outputs = [process.communicate(timeout=timeout)[0] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        server.shutdown()
    if any(process.returncode != 0 for process in processes):
        raise AssertionError("\n".join(f"--- group {i}:\n{out[-4000:]}" for i, out in enumerate(outputs)))
    return outputs
