"""execute_subprocess_async runs real commands, including a 2-process `accelerate launch`."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from accelerate.test_utils import (
    DEFAULT_LAUNCH_COMMAND,
    execute_subprocess_async,
    get_launch_command,
    get_torch_dist_unique_port,
    path_in_accelerate_package,
    pytest_xdist_worker_id,
)
from accelerate.test_utils.testing import SubprocessCallException, run_command
from tests.commands.helpers import cli_env

RANK_SCRIPT = """
import torch.distributed as dist
from accelerate import PartialState
state = PartialState()
total = [state.process_index]
if state.num_processes > 1:
    objs = [None] * state.num_processes
    dist.all_gather_object(objs, state.process_index)
    total = objs
import os
# One write per line: print() writes the text and the newline separately, so two processes sharing
# the pipe could interleave them.
os.write(1, f"rank {state.process_index} of {state.num_processes} saw {sorted(total)}\\n".encode())
"""


def _script(tmp_path: Path, body: str, name: str = "script.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_get_launch_command() -> None:
    assert get_launch_command() == ["accelerate", "launch"]
    cmd = get_launch_command(num_processes=2, cpu=True, multi_gpu=False, mixed_precision="bf16", gpu_ids=None)
    assert cmd == ["accelerate", "launch", "--num_processes=2", "--cpu", "--mixed_precision=bf16"]
    assert DEFAULT_LAUNCH_COMMAND == ["accelerate", "launch", "--num_processes=1", "--monitor_interval=0.1"]


def test_two_process_launch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = _script(tmp_path, RANK_SCRIPT)
    cmd = get_launch_command(num_processes=2, cpu=True) + [script]
    result = execute_subprocess_async(cmd, env=cli_env(tmp_path / "home"), timeout=240)
    assert result.returncode == 0
    lines = [line for line in result.stdout if line.startswith("rank ")]
    assert sorted(lines) == ["rank 0 of 2 saw [0, 1]", "rank 1 of 2 saw [0, 1]"]
    echoed = capsys.readouterr().out
    assert "Running:" in echoed and "rank 1 of 2" in echoed  # output streamed through


def test_default_launch_command_runs_one_process(tmp_path: Path) -> None:
    script = _script(tmp_path, RANK_SCRIPT)
    result = execute_subprocess_async(
        DEFAULT_LAUNCH_COMMAND + ["--cpu", str(script)],
        env=cli_env(tmp_path / "home"),
        quiet=True,
        echo=False,
    )
    assert "rank 0 of 1 saw [0]" in result.stdout


def test_failure_raises_with_stderr(tmp_path: Path) -> None:
    script = _script(tmp_path, "import sys\nprint('boom-on-stderr', file=sys.stderr)\nsys.exit(3)\n")
    with pytest.raises(RuntimeError, match=r"returncode 3(.|\n)*boom-on-stderr"):
        execute_subprocess_async([sys.executable, script], quiet=True)


def test_stdin_and_streams(tmp_path: Path) -> None:
    script = _script(
        tmp_path, "import sys\ndata = sys.stdin.read()\nprint(data.upper())\nprint('err', file=sys.stderr)\n"
    )
    result = execute_subprocess_async([sys.executable, script], stdin="hello", quiet=True, echo=False)
    assert result.stdout == ["HELLO"] and result.stderr == ["err"]


def test_timeout_stops_the_command(tmp_path: Path) -> None:
    script = _script(tmp_path, "import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    with pytest.raises(RuntimeError, match="did not finish within 1s"):
        execute_subprocess_async([sys.executable, script], timeout=1, quiet=True)


def _gone(pid_file: Path) -> bool:
    """Whether every process listed in ``pid_file`` has exited (a zombie counts as exited)."""
    for pid in json.loads(pid_file.read_text()):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                    return False
        except FileNotFoundError:
            continue
    return True


@pytest.fixture
def pid_file(tmp_path: Path) -> Any:
    path = tmp_path / "pids.json"
    yield path
    if path.exists():  # a regression must not leave sleepers behind
        for pid in json.loads(path.read_text()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _records_pid(pid_file: Path, pid: str = "os.getpid()") -> str:
    return f"import json, os; from pathlib import Path; Path({str(pid_file)!r}).write_text(json.dumps([{pid}]))\n"


def test_a_command_ended_by_a_signal_names_its_returncode() -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    with pytest.raises(RuntimeError, match=f"returncode {-signal.SIGTERM}"):
        execute_subprocess_async([sys.executable, "-c", code], quiet=True, echo=False)


@pytest.mark.parametrize("closes_its_output", [False, True])
def test_a_timeout_is_a_timeout_error_holding_both_streams(pid_file: Path, closes_its_output: bool) -> None:
    code = _records_pid(pid_file) + "import sys, time\nprint('out-line', flush=True)\n"
    code += "print('err-line', file=sys.stderr, flush=True)\n"
    if closes_its_output:
        code += "os.close(1); os.close(2)\n"
    code += "time.sleep(30)\n"
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="timed out") as raised:
        execute_subprocess_async([sys.executable, "-c", code], timeout=1, quiet=True, echo=False)
    assert time.monotonic() - began < 5
    assert "out-line" in str(raised.value) and "err-line" in str(raised.value)
    assert isinstance(raised.value, RuntimeError)  # what callers of the other failures catch
    assert _gone(pid_file)


def test_a_timeout_also_stops_a_worker_the_command_left_running(pid_file: Path) -> None:
    # The command exits at once, but the worker it started keeps its output pipes open.
    code = "import subprocess, sys\nworker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
    code += _records_pid(pid_file, "worker.pid")
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="timed out"):
        execute_subprocess_async([sys.executable, "-c", code], timeout=1, quiet=True, echo=False)
    assert time.monotonic() - began < 5
    assert _gone(pid_file)


def test_output_that_is_not_utf8_raises_and_stops_the_command(pid_file: Path) -> None:
    code = _records_pid(pid_file) + "import time\nos.write(1, bytes([255, 10]))\ntime.sleep(30)\n"
    began = time.monotonic()
    with pytest.raises(UnicodeDecodeError):
        execute_subprocess_async([sys.executable, "-c", code], timeout=10, quiet=True, echo=False)
    assert time.monotonic() - began < 5
    assert _gone(pid_file)


def test_empty_command_is_an_error() -> None:
    with pytest.raises(ValueError, match="empty"):
        execute_subprocess_async([])


def test_run_command(tmp_path: Path) -> None:
    out = run_command([sys.executable, "-c", "print('hi')"], return_stdout=True)
    assert out is not None and out.strip() == "hi"
    assert run_command([sys.executable, "-c", "pass"]) is None
    with pytest.raises(SubprocessCallException, match="exit code 2(.|\n)*bad thing"):
        run_command([sys.executable, "-c", "import sys; print('bad thing'); sys.exit(2)"])
    with pytest.raises(SubprocessCallException, match="could not start"):
        run_command([str(tmp_path / "no-such-program")])


def test_run_command_accelerate_is_this_install() -> None:
    out = run_command(["accelerate", "--help"], return_stdout=True)
    assert out is not None and "launch" in out


def test_xdist_worker_id_and_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert pytest_xdist_worker_id() == 0
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")
    assert pytest_xdist_worker_id() == 7
    port = get_torch_dist_unique_port()
    assert port >= 29507 and (port - 29507) % 128 == 0
    # Hold that port: the next answer is the next free one in this worker's series.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", port))
        sock.listen()
        other = get_torch_dist_unique_port()
    assert other != port and (other - 29507) % 128 == 0


def test_path_in_accelerate_package() -> None:
    import accelerate

    path = path_in_accelerate_package("test_utils", "scripts", "test_ops.py")
    assert path.is_file() and path.is_relative_to(Path(accelerate.__file__).resolve().parent)
