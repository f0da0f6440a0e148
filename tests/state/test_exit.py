"""Issue 19: a launched 2-process run must exit 0 every time, also in a terminal.

Each run is a real ``accelerate launch`` with a pseudo-terminal (the setting in which the abort at
exit was seen), through ``scripts/threads_at_exit.py``. Besides the exit code, which only catches
the abort when the race is lost, every run reports which gloo and Python threads are still alive
once accelerate's exit teardown has run: a thread alive then is the cause itself, checked on every
run. The last test checks the other side: a rank that really aborts at exit fails the launch.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.commands.helpers import REPO, accelerate_cmd, cli_env, reserved_port, run_cli
from tests.helpers.terminal import run_in_terminal

SCRIPTS = Path(__file__).resolve().parent / "scripts"
LAUNCH = ("launch", "--cpu", "--num_processes", "2")


def _launch_reporting_threads(tmp_path: Path, *script_and_args: str) -> str:
    """Launches the script in a terminal; checks exit 0 and that no thread outlived the teardown."""
    wrapper = str(SCRIPTS / "threads_at_exit.py")
    with reserved_port() as port:
        cmd = accelerate_cmd(*LAUNCH, "--main_process_port", str(port), wrapper, *script_and_args)
        code, output = run_in_terminal(cmd, env=cli_env(tmp_path / "home"), cwd=str(REPO), timeout=180)
    assert code == 0 and "terminate called" not in output, f"accelerate launch exited {code}:\n{output}"
    reports = dict(re.findall(r"rank (\d): threads at exit: \[([^\]]*)\]", output))
    assert sorted(reports) == ["0", "1"], output
    if "unknown" not in reports.values():  # /proc is there to tell (Linux)
        assert reports == {"0": "none", "1": "none"}, output
    return output


# The three ways a script may end: as the example does, by just returning, and with the prepared
# model still referenced from a module global at exit.
@pytest.mark.parametrize("mode", ["end_training", "return", "global"])
def test_no_thread_outlives_the_exit_teardown(tmp_path: Path, mode: str) -> None:
    _launch_reporting_threads(tmp_path, str(SCRIPTS / "exit_check.py"), mode)


@pytest.mark.parametrize("run", [1, 2])
def test_example_exits_cleanly_in_a_terminal(tmp_path: Path, run: int) -> None:
    example = str(REPO / "examples" / "train_classifier.py")
    args = ("--epochs", "1", "--train_samples", "256", "--eval_samples", "100")
    assert "Final accuracy" in _launch_reporting_threads(tmp_path, example, *args)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_that_aborts_after_its_script_returned_fails_the_launch(tmp_path: Path, rank: int) -> None:
    """The teardown must not hide a real failure: an abort at exit is the launch's failure, named."""
    with reserved_port() as port:
        result = run_cli(*LAUNCH, "--main_process_port", str(port), str(SCRIPTS / "abort_at_exit.py"),
                         str(rank), home=tmp_path, timeout=180)  # fmt: skip
    output = result.stdout + result.stderr
    assert "rank 0: script returned, sum 2" in output and "rank 1: script returned, sum 2" in output, output
    assert result.returncode == 128 + signal.SIGABRT, output
    title = rf"accelerate launch: rank {rank} \(pid \d+\) failed with signal SIGABRT"
    assert re.search(title, output), output
