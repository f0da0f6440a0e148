"""Running commands from tests: ``accelerate launch`` command lines, subprocesses, ports, paths."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from accelerate.utils.ports import can_bind

# What upstream's test-suite launches by default: one process, a fast-polling agent.
DEFAULT_LAUNCH_COMMAND: list[str] = ["accelerate", "launch", "--num_processes=1", "--monitor_interval=0.1"]

_BASE_PORT = 29500
# Ports a pytest-xdist worker may try: its own first, then every _PORT_STRIDE-th above it.
_PORT_STRIDE = 128
_PORT_CEILING = 32768  # stay below Linux's ephemeral range: those ports can be taken by any connection


class SubprocessCallException(Exception):
    """A command run by :func:`run_command` failed; the message holds the command and its output."""


@dataclass
class SubprocessResult:
    """What :func:`execute_subprocess_async` saw: the exit code and the output lines of each stream."""

    returncode: int
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


def path_in_accelerate_package(*components: str) -> Path:
    """The path of ``components`` inside the installed ``accelerate`` package.

    Example: ``path_in_accelerate_package("test_utils", "scripts", "test_ops.py")``.
    """
    import accelerate

    return Path(accelerate.__file__).resolve().parent.joinpath(*components)


def get_launch_command(**kwargs: Any) -> list[str]:
    """``["accelerate", "launch", ...]`` with one flag per keyword.

    ``True`` gives a bare switch (``cpu=True`` -> ``--cpu``), ``False`` and ``None`` leave the flag
    out, anything else is written ``--name=value``. Append the script and its arguments yourself.

    Example: ``get_launch_command(num_processes=2, cpu=True) + ["train.py", "--epochs", "1"]``.
    """
    command = ["accelerate", "launch"]
    for name, value in kwargs.items():
        if value is None or value is False:
            continue
        command.append(f"--{name}" if value is True else f"--{name}={value}")
    return command


def pytest_xdist_worker_id() -> int:
    """The number of this pytest-xdist worker (``gw3`` -> 3), or 0 outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = worker.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0


def get_torch_dist_unique_port() -> int:
    """A rendezvous port for ``torch.distributed`` that differs between pytest-xdist workers.

    29500 plus the worker number when that port is free; otherwise the next free port in the
    worker's own series (every 128th above it), so parallel workers never pick the same one.
    """
    first = _BASE_PORT + pytest_xdist_worker_id()
    for port in range(first, _PORT_CEILING, _PORT_STRIDE):
        if can_bind(port):
            return port
    raise RuntimeError(
        f"get_torch_dist_unique_port: no free port in {first}..{_PORT_CEILING} (step {_PORT_STRIDE})"
    )


def _resolve(cmd: Sequence[str | os.PathLike[str]]) -> list[str]:
    """The command as strings; a bare ``accelerate`` runs this interpreter's accelerate CLI.

    ``accelerate`` on PATH may belong to another environment (or be missing when the venv is not
    activated); the test means the accelerate it is testing, i.e. the one this Python imports.
    """
    parts = [os.fspath(part) for part in cmd]
    if not parts:
        raise ValueError("the command to run is empty; pass a list such as ['python', 'script.py']")
    if parts[0] == "accelerate":
        return [sys.executable, "-m", "accelerate.commands.accelerate_cli", *parts[1:]]
    return parts


class SubprocessTimeoutError(TimeoutError, RuntimeError):
    """:func:`execute_subprocess_async` stopped a command that ran past its timeout (a ``TimeoutError``
    as upstream raises, and a ``RuntimeError`` as this function raises for every other failure)."""


def _pump(stream: IO[bytes], sink: list[str], echo_to: IO[str] | None, failures: list[BaseException]) -> None:
    try:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8").rstrip("\n")  # output that is not UTF-8 is an error, as upstream
            sink.append(line)
            if echo_to is not None:
                print(line, file=echo_to, flush=True)
    except Exception as exc:  # re-raised by execute_subprocess_async once the command is stopped
        failures.append(exc)
    finally:
        stream.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Ends the command and everything it started (it runs in its own process group), also when the
    command itself has already exited and left workers behind."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(proc.pid):
                break
            time.sleep(0.02)
        else:
            continue
        break
    proc.poll()


def execute_subprocess_async(
    cmd: Sequence[str | os.PathLike[str]],
    env: Mapping[str, str] | None = None,
    stdin: str | bytes | None = None,
    timeout: float = 180,
    quiet: bool = False,
    echo: bool = True,
) -> SubprocessResult:
    """Runs ``cmd`` to completion, streaming its output live, and returns it.

    Args:
        cmd: the command and its arguments; a leading ``accelerate`` runs the accelerate CLI of this
            interpreter (so ``get_launch_command(...) + [script]`` tests this install).
        env: the child's whole environment (default: this process's).
        stdin: text or bytes written to the child's standard input (default: none, reads get EOF).
        timeout: seconds until the command has exited and closed its output (a worker it started
            may hold the output open); then it and every process it started are stopped.
        quiet: do not echo the child's output lines as they arrive.
        echo: print the command line before running it.

    Returns:
        ``SubprocessResult(returncode, stdout, stderr)``, output split into lines.

    Raises:
        RuntimeError: the command exited with a non-zero code (the message says ``returncode N``,
            with what it wrote to stderr).
        SubprocessTimeoutError: (a ``TimeoutError`` and a ``RuntimeError``) it ran past ``timeout``;
            the message holds what it wrote to stdout and stderr.
        UnicodeDecodeError: it wrote output that is not UTF-8 (it is stopped first).
        KeyboardInterrupt: raised here while it ran; it is stopped first.
    """
    args = _resolve(cmd)
    if echo:
        print("\nRunning: ", " ".join(args), flush=True)
    proc = subprocess.Popen(
        args,
        env=dict(env) if env is not None else None,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, so a timeout can stop launched workers too
    )
    result = SubprocessResult(returncode=0)
    failures: list[BaseException] = []
    if proc.stdout is None or proc.stderr is None:  # cannot happen with PIPE; narrows the types
        raise RuntimeError("subprocess.Popen returned no output pipes")
    readers = [
        threading.Thread(
            target=_pump,
            args=(proc.stdout, result.stdout, None if quiet else sys.stdout, failures),
            daemon=True,
        ),
        threading.Thread(
            target=_pump,
            args=(proc.stderr, result.stderr, None if quiet else sys.stderr, failures),
            daemon=True,
        ),
    ]
    timed_out = False
    try:
        for reader in readers:
            reader.start()
        if stdin is not None and proc.stdin is not None:
            try:
                proc.stdin.write(stdin.encode() if isinstance(stdin, str) else stdin)
                proc.stdin.close()
            except BrokenPipeError:  # the child exited without reading: its exit code tells the story
                pass
        deadline = time.monotonic() + timeout
        # Done when the command has exited and both pipes are closed (no worker holds them open).
        while not failures and (proc.poll() is None or any(reader.is_alive() for reader in readers)):
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(0.02)
    except BaseException:
        _stop(proc)
        raise
    if timed_out or failures:
        _stop(proc)
    for reader in readers:
        reader.join(timeout=10)
    if failures:
        raise failures[0]
    result.returncode = proc.returncode
    command = " ".join(args)
    stdout, stderr = "\n".join(result.stdout), "\n".join(result.stderr)
    if timed_out:
        raise SubprocessTimeoutError(
            f"'{command}' timed out: it did not finish within {timeout}s and was stopped."
            f"\n\nIts stdout:\n{stdout}\n\nIts stderr:\n{stderr}"
        )
    if result.returncode != 0:
        raise RuntimeError(
            f"'{command}' failed with returncode {result.returncode}.\n\nIts stderr:\n{stderr}"
        )
    return result


def run_command(
    command: Sequence[str | os.PathLike[str]],
    return_stdout: bool = False,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """Runs ``command`` (stdout and stderr merged) and returns its output if ``return_stdout``.

    Raises:
        SubprocessCallException: the command exited with a non-zero code; the message holds the
            command and its output.
    """
    args = _resolve(command)
    try:
        output = subprocess.check_output(
            args, stderr=subprocess.STDOUT, env=dict(env) if env is not None else None
        )
    except subprocess.CalledProcessError as exc:
        raise SubprocessCallException(
            f"Command `{' '.join(args)}` failed with exit code {exc.returncode}:\n"
            f"{exc.output.decode('utf-8', errors='replace')}"
        ) from exc
    except FileNotFoundError as exc:
        raise SubprocessCallException(f"Command `{' '.join(args)}` could not start: {exc}") from exc
    return output.decode("utf-8", errors="replace") if return_stdout else None
