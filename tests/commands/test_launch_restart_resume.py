"""Restart and resume: a 2-process run whose rank 1 dies mid-run finishes with an uninterrupted run's weights.

`accelerate launch --max_restarts 1` restarts both processes after the failure; the script resumes with
`load_state(missing_ok=True)` from the newest committed checkpoint (see scripts/resume_after_crash.py).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.commands.helpers import SCRIPTS, accelerate_cmd, cli_env, reserved_port
from tests.helpers.side_by_side import BackgroundRun, selected

SCRIPT = str(SCRIPTS / "resume_after_crash.py")
# The runs, each as (its extra script arguments, --max_restarts); the module starts the ones its
# selected tests read side by side (tests/helpers/side_by_side.py): each spends much of its time in
# start-up and in the restart's teardown, so together they take far less than one after the other.
_RUNS: dict[str, tuple[tuple[str, ...], int]] = {
    "reference": ((), 0),
    "crashed": (("--die", "once"), 1),
    "stateless": (("--die", "once", "--stateless_loader"), 1),
    "doomed": (("--die", "always"), 1),
}
_RUNS_OF_TEST = {
    "test_a_run_that_loses_a_rank_ends_bitwise_like_an_uninterrupted_one": ("reference", "crashed"),
    "test_the_same_with_upstreams_default_loader_and_the_skip": ("reference", "stateless"),
    "test_the_console_names_the_failed_rank_why_and_the_restart": ("crashed",),
    "test_when_restarts_run_out_the_launcher_exits_with_the_failure": ("doomed",),
}


@pytest.fixture(scope="module")
def launched(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, dict[str, BackgroundRun]]]:
    """The folder all runs write to (NAME/ projects, NAME.pt parameters) and the runs, started at once.

    The uninterrupted reference run (--max_restarts 0) leaves reference.pt.
    """
    home = tmp_path_factory.mktemp("restart")
    runs: dict[str, BackgroundRun] = {}
    with contextlib.ExitStack() as ports:  # each port held until the module ends
        try:
            for name in sorted(selected(request, _RUNS_OF_TEST)):
                extra, restarts = _RUNS[name]
                port = ports.enter_context(reserved_port())
                cmd = accelerate_cmd(
                    "launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port),
                    "--max_restarts", str(restarts), "--monitor_interval", "0.2", SCRIPT,
                    str(home / name), str(home / f"{name}.pt"), *extra,
                )  # fmt: skip
                runs[name] = BackgroundRun(cmd, folder=home / "logs" / name, env=cli_env(home), timeout=240)
            yield home, runs
        finally:
            for run in runs.values():
                run.stop()


@pytest.fixture(scope="module")
def home(launched: tuple[Path, dict[str, BackgroundRun]]) -> Path:
    """Holds the uninterrupted reference run's final parameters (reference.pt)."""
    home, runs = launched
    reference = runs["reference"].result()
    assert reference.returncode == 0, reference.stdout + reference.stderr
    return home


@pytest.fixture(scope="module")
def runs(launched: tuple[Path, dict[str, BackgroundRun]]) -> tuple[Path, subprocess.CompletedProcess[str]]:
    home, started = launched
    return home, started["crashed"].result()


def _check_resumed_bitwise(home: Path, name: str, crashed: subprocess.CompletedProcess[str]) -> None:
    assert crashed.returncode == 0, crashed.stdout + crashed.stderr
    assert (home / f"{name}.pt.died").is_file()  # rank 1 really died once
    resumed_from = home / name / "checkpoints" / "checkpoint_1"
    for rank in (0, 1):
        assert f"rank {rank} attempt 0 resumed from None at step 0" in crashed.stdout
        assert f"rank {rank} attempt 1 resumed from {resumed_from} at step 6" in crashed.stdout
        assert f"rank {rank} finished at step 14" in crashed.stdout
    expected = torch.load(home / "reference.pt")
    got = torch.load(home / f"{name}.pt")
    assert expected.keys() == got.keys()
    for key, tensor in expected.items():
        assert torch.equal(tensor, got[key]), key


def test_a_run_that_loses_a_rank_ends_bitwise_like_an_uninterrupted_one(
    runs: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    home, crashed = runs
    _check_resumed_bitwise(home, "crashed", crashed)


def test_the_same_with_upstreams_default_loader_and_the_skip(
    home: Path, launched: tuple[Path, dict[str, BackgroundRun]]
) -> None:
    # use_stateful_dataloader=False: load_state restores epoch and shuffle only; the script's
    # skip_first_batches passes over the batches the interrupted epoch already trained on.
    _check_resumed_bitwise(home, "stateless", launched[1]["stateless"].result())


def test_the_console_names_the_failed_rank_why_and_the_restart(
    runs: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, crashed = runs
    report = crashed.stderr.split("accelerate launch: rank 1 (pid", 1)[1]
    assert report.split("\n", 1)[0].endswith("failed with exit code 13 (the first to fail)")
    assert "no Python traceback (os._exit" in report
    assert "rank 0 ended with signal SIGTERM (stopped by the launcher) after rank 1 failed" in report
    assert "restarting every process (restart attempt 1 of 1, --max_restarts 1)" in report
    assert "no restarts left" not in crashed.stderr


def test_when_restarts_run_out_the_launcher_exits_with_the_failure(
    launched: tuple[Path, dict[str, BackgroundRun]],
) -> None:
    result = launched[1]["doomed"].result()
    assert result.returncode == 13, result.stdout + result.stderr
    assert result.stderr.count("restart attempt 1 of 1") == 1
    # The second attempt resumed from the checkpoint the first one committed, then died again.
    assert "rank 1 attempt 1 resumed from" in result.stdout and "checkpoint_1 at step 6" in result.stdout
    final = result.stderr.rsplit("restart attempt 1 of 1", 1)[1]
    assert "accelerate launch: rank 1 (pid" in final and "failed with exit code 13" in final
    assert "no restarts left (--max_restarts 1 used up)" in final
