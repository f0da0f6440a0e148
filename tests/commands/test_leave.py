"""How the ``accelerate launch`` console process ends: exit handlers run, then no interpreter teardown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from accelerate.launch.runner import remove_agent_log_folder
from tests.commands.helpers import cli_env, run_cli


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], env=cli_env(tmp_path), capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def test_leave_runs_the_exit_handlers_flushes_and_exits_with_the_code(tmp_path: Path) -> None:
    marker = tmp_path / "handler_ran"
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').write('ok'))\n"
        "from accelerate.commands.accelerate_cli import leave\n"
        "sys.stdout.write('no newline, still buffered')\n"
        "sys.stderr.write('to stderr')\n"
        "leave(3)\n"
        "print('not reached')\n"
    )
    result = _python(code, tmp_path)
    assert result.returncode == 3, result.stderr
    assert result.stdout == "no newline, still buffered"
    assert result.stderr.endswith("to stderr")
    assert marker.read_text() == "ok"


def test_leave_keeps_the_normal_exit_while_another_thread_still_works(tmp_path: Path) -> None:
    """A normal exit waits for non-daemon threads; os._exit would cut this one's work short."""
    code = (
        "import threading, time\n"
        "def work():\n"
        "    time.sleep(0.3)\n"
        "    print('thread finished', flush=True)\n"
        "threading.Thread(target=work).start()\n"
        "from accelerate.commands.accelerate_cli import leave\n"
        "leave(4)\n"
    )
    result = _python(code, tmp_path)
    assert result.returncode == 4, result.stderr
    assert "thread finished" in result.stdout


def test_a_launch_from_the_console_leaves_no_torchelastic_folder_behind(tmp_path: Path) -> None:
    """torch's agent makes a log folder per launch in the temp dir; without --tee it stays empty and
    is removed (it used to pile up, one per launch). The exit code is the workers'."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    script = tmp_path / "script.py"
    script.write_text("import torch.distributed as dist\nprint('ran')\n")
    result = run_cli("launch", "--num_processes", "2", str(script), home=tmp_path, TMPDIR=str(temp))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ran") == 2
    assert not [p.name for p in temp.iterdir() if p.name.startswith("torchelastic_")]


def test_the_agents_log_folder_is_kept_only_with_logs_the_user_asked_for(tmp_path: Path) -> None:
    kept = tmp_path / "torchelastic_kept" / "run_0" / "attempt_0" / "0"
    kept.mkdir(parents=True)
    (kept / "error.json").write_text("{}")
    (kept / "stdout.log").write_text("the worker's output (--tee)")
    remove_agent_log_folder(str(tmp_path / "torchelastic_kept"))
    assert (kept / "stdout.log").exists() and (kept / "error.json").exists()
    empty = tmp_path / "torchelastic_empty" / "run_0" / "attempt_0" / "1"
    empty.mkdir(parents=True)
    remove_agent_log_folder(str(tmp_path / "torchelastic_empty"))
    assert not (tmp_path / "torchelastic_empty").exists()
    # A failed launch: only the error files the failure summary has read.
    failed = tmp_path / "torchelastic_failed" / "run_0" / "attempt_0"
    for rank in ("0", "1"):
        (failed / rank).mkdir(parents=True)
    (failed / "1" / "error.json").write_text("{}")
    remove_agent_log_folder(str(tmp_path / "torchelastic_failed"))
    assert not (tmp_path / "torchelastic_failed").exists()
    remove_agent_log_folder(None)  # --log_dir given: nothing of ours to remove
    remove_agent_log_folder(str(tmp_path / "never_made"))
