"""Running the `accelerate` CLI in a subprocess for tests, with an isolated HF_HOME."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from accelerate.commands.config import ask_questions
from accelerate.commands.prompts import PlainPrompter

SCRIPTS = Path(__file__).resolve().parent / "scripts"
REPO = Path(__file__).resolve().parents[2]


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
    env.update({"HF_HOME": str(home), "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1", **extra})
    env.pop("XDG_CACHE_HOME", None)
    return env


def accelerate_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "accelerate.commands.accelerate_cli", *args]


def run_cli(
    *args: str, home: Path, timeout: float = 120, stdin: str | None = None, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        accelerate_cmd(*args), env=cli_env(home, **extra), capture_output=True, text=True, timeout=timeout,
        input=stdin,
    )  # fmt: skip


@contextlib.contextmanager
def reserved_port() -> Iterator[int]:
    """A TCP port held for a launcher by this test until the block ends, so nothing else can take it.

    The socket is bound (never listening) with SO_REUSEADDR: a plain bind() by any other process
    fails on the port, outgoing connections never get a bound port, yet torch's TCPStore, which
    binds with SO_REUSEADDR too, can still bind and listen on it. There is no window between
    choosing the port and the launcher binding it, unlike probing a port and closing the probe.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", 0))
        yield int(sock.getsockname()[1])


class Script:
    """A PlainPrompter fed from a list of answers; keeps the screen to check what was (not) asked."""

    def __init__(self, *answers: str) -> None:
        self._answers: Iterator[str] = iter(answers)
        self.screen = io.StringIO()
        self.prompter = PlainPrompter(read=self._read, out=self.screen)

    def _read(self, prompt: str) -> str:
        self.screen.write(prompt + "\n")
        answer = next(self._answers, None)
        if answer is None:
            raise AssertionError(f"the questionnaire asked more than scripted: {prompt!r}")
        return answer

    def ask(self, gpu_count: int = 0, xla_available: bool = False) -> dict[str, Any]:
        data = ask_questions(self.prompter, gpu_count, xla_available=xla_available)
        assert next(self._answers, None) is None, "the questionnaire asked fewer questions than scripted"
        return data
