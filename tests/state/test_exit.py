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
import subprocess
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.commands.helpers import REPO, accelerate_cmd, cli_env, reserved_port, run_cli
from tests.helpers.side_by_side import selected
from tests.helpers.terminal import run_in_terminal

SCRIPTS = Path(__file__).resolve().parent / "scripts"
LAUNCH = ("launch", "--cpu", "--num_processes", "2")
EXAMPLE_ARGS = ("--epochs", "1", "--train_samples", "256", "--eval_samples", "100")


def _in_terminal(home: Path, *script_and_args: str) -> tuple[int, str]:
    """Launches the script, through threads_at_exit.py, in a terminal of its own."""
    wrapper = str(SCRIPTS / "threads_at_exit.py")
    with reserved_port() as port:
        cmd = accelerate_cmd(*LAUNCH, "--main_process_port", str(port), wrapper, *script_and_args)
        return run_in_terminal(cmd, env=cli_env(home / "home"), cwd=str(REPO), timeout=180)


def _aborting(home: Path, rank: int) -> subprocess.CompletedProcess[str]:
    with reserved_port() as port:
        return run_cli(*LAUNCH, "--main_process_port", str(port), str(SCRIPTS / "abort_at_exit.py"),
                       str(rank), home=home, timeout=180)  # fmt: skip


# Every test's launch: each is a separate run (issue 19's "every time"), started ahead of its test,
# three at a time, each in a thread of the module's pool: a launch spends much of its time starting
# interpreters while a core idles.
_CASES_OF_TEST = {
    "test_no_thread_outlives_the_exit_teardown": ["end_training", "return", "global"],
    "test_example_exits_cleanly_in_a_terminal": ["example-1", "example-2"],
    "test_a_rank_that_aborts_after_its_script_returned_fails_the_launch": ["abort-0", "abort-1"],
}
_AT_ONCE = 3


class _Launched(NamedTuple):
    in_terminal: dict[str, Future[tuple[int, str]]]  # by exit_check.py mode or example-RUN
    aborting: dict[int, Future[subprocess.CompletedProcess[str]]]  # by the rank that aborts


@pytest.fixture(scope="module")
def launched(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Launched]:
    wanted = selected(request, _CASES_OF_TEST)
    exit_check, example = str(SCRIPTS / "exit_check.py"), str(REPO / "examples" / "train_classifier.py")
    with ThreadPoolExecutor(max_workers=_AT_ONCE, thread_name_prefix="test-exit-launch") as pool:
        # Submitted in the tests' order: the pool starts them in that order as places free up.
        in_terminal = {
            mode: pool.submit(_in_terminal, tmp_path_factory.mktemp(mode), exit_check, mode)
            for mode in ("end_training", "return", "global")
            if mode in wanted
        }
        for run in ("example-1", "example-2"):
            if run in wanted:
                in_terminal[run] = pool.submit(
                    _in_terminal, tmp_path_factory.mktemp(run), example, *EXAMPLE_ARGS
                )
        aborting = {
            rank: pool.submit(_aborting, tmp_path_factory.mktemp(f"abort-{rank}"), rank)
            for rank in (0, 1)
            if f"abort-{rank}" in wanted
        }
        try:
            yield _Launched(in_terminal, aborting)
        finally:  # what no test read (a test failed before reading) is not waited for in vain
            for future in [*in_terminal.values(), *aborting.values()]:
                future.cancel()


def _launch_reporting_threads(launched: _Launched, case: str) -> str:
    """The case's terminal launch; checks exit 0 and that no thread outlived the teardown."""
    code, output = launched.in_terminal[case].result()
    assert code == 0 and "terminate called" not in output, f"accelerate launch exited {code}:\n{output}"
    reports = dict(re.findall(r"rank (\d): threads at exit: \[([^\]]*)\]", output))
    assert sorted(reports) == ["0", "1"], output
    if "unknown" not in reports.values():  # /proc is there to tell (Linux)
        assert reports == {"0": "none", "1": "none"}, output
    return output


# The three ways a script may end: as the example does, by just returning, and with the prepared
# model still referenced from a module global at exit.
@pytest.mark.parametrize("mode", ["end_training", "return", "global"])
def test_no_thread_outlives_the_exit_teardown(launched: _Launched, mode: str) -> None:
    _launch_reporting_threads(launched, mode)


@pytest.mark.parametrize("run", [1, 2])
def test_example_exits_cleanly_in_a_terminal(launched: _Launched, run: int) -> None:
    assert "Final accuracy" in _launch_reporting_threads(launched, f"example-{run}")


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_that_aborts_after_its_script_returned_fails_the_launch(
    launched: _Launched, rank: int
) -> None:
    """The teardown must not hide a real failure: an abort at exit is the launch's failure, named."""
    result = launched.aborting[rank].result()
    output = result.stdout + result.stderr
    assert "rank 0: script returned, sum 2" in output and "rank 1: script returned, sum 2" in output, output
    assert result.returncode == 128 + signal.SIGABRT, output
    title = rf"accelerate launch: rank {rank} \(pid \d+\) failed with signal SIGABRT"
    assert re.search(title, output), output
