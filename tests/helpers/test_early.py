"""The session-start commands of tests/helpers/early.py, in a pytest session of their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]

_TESTS = """
import sys
from pathlib import Path

import pytest

from tests.helpers.side_by_side import BackgroundRun


def _echo(word):
    def start(folder):
        code = f"import pathlib; pathlib.Path({str(folder / 'out')!r}).write_text({word!r})"
        return BackgroundRun([sys.executable, "-c", code], folder=folder / "logs", env={}, timeout=60)
    return start


def _broken(folder):
    raise RuntimeError("this command cannot start")


def test_first(tmp_path_factory):
    # Runs before the tests below: their commands were already started with the session.
    started = sorted(p.name for p in (tmp_path_factory.getbasetemp() / "early0").iterdir())
    Path(tmp_path_factory.getbasetemp().parent / "started.txt").write_text(" ".join(started))


@pytest.mark.early(start=_echo("a"))
def test_reads_its_own(early_run):
    assert early_run.result().returncode == 0
    assert (early_run.folder / "out").read_text() == "a"


@pytest.mark.early(start=_echo("b"))
def test_deselected(early_run):
    raise AssertionError("never selected")


@pytest.mark.skip(reason="skipped")
@pytest.mark.early(start=_echo("c"))
def test_skipped(early_run):
    raise AssertionError("never runs")


@pytest.mark.early(start=_broken)
def test_broken_start(early_run):
    raise AssertionError("unreachable: the fixture raises")


def test_unmarked(early_run):
    raise AssertionError("unreachable: the fixture raises")
"""


def test_commands_start_with_the_session_and_each_test_reads_its_own(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.helpers.early"]\n')
    (tmp_path / "test_inner.py").write_text(_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    early(start): starts with the session\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--strict-markers",
        "--basetemp", str(tmp_path / "base"), "-k", "not deselected", str(tmp_path),
    ]  # fmt: skip
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "2 passed, 1 skipped, 1 deselected, 2 errors" in result.stdout, result.stdout + result.stderr
    # Only the selected, not skipped tests' commands started, in order, all before the first test ran.
    assert (tmp_path / "started.txt").read_text() == "0-test_reads_its_own 1-test_broken_start"
    # The start that raised is its own test's error, not the session's first test's.
    assert "ERROR test_inner.py::test_broken_start - RuntimeError: this command cannot start" in result.stdout
    # A test that asks for early_run without the marker is told so.
    assert "test_inner.py::test_unmarked uses early_run without @pytest.mark.early" in result.stdout
