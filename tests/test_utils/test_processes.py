"""execute_subprocess_async runs real commands, including a 2-process `accelerate launch`."""

from __future__ import annotations

import socket
import sys
import textwrap
from pathlib import Path

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
    with pytest.raises(RuntimeError, match=r"return code 3(.|\n)*boom-on-stderr"):
        execute_subprocess_async([sys.executable, script], quiet=True)


def test_stdin_and_streams(tmp_path: Path) -> None:
    script = _script(
        tmp_path, "import sys\ndata = sys.stdin.read()\nprint(data.upper())\nprint('err', file=sys.stderr)\n"
    )
    result = execute_subprocess_async([sys.executable, script], stdin="hello", quiet=True, echo=False)
    assert result.stdout == ["HELLO"] and result.stderr == ["err"]


def test_timeout_stops_the_command(tmp_path: Path) -> None:
    script = _script(tmp_path, "import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    with pytest.raises(RuntimeError, match="did not finish within 2s"):
        execute_subprocess_async([sys.executable, script], timeout=2, quiet=True)


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
