"""make test's two lanes (tests/helpers/lanes.py): the split, the combined status, the in-process check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import lanes

_ROOT = Path(__file__).resolve().parents[2]


def test_every_in_process_path_exists_and_none_is_a_process_test() -> None:
    assert lanes.missing() == []
    assert len(set(lanes.IN_PROCESS)) == len(lanes.IN_PROCESS)
    for path in lanes.IN_PROCESS:
        # Folders and files under tests/, never the whole suite or a helper the process lane needs.
        assert path.startswith("tests/") and path != "tests/", path
        assert not path.startswith("tests/helpers"), path


def test_the_process_lane_runs_everything_the_in_process_lane_does_not() -> None:
    process_cmd, in_process_cmd = lanes.commands(["-q", "--durations=15"], ["tests/a_test.py", "tests/b"])
    assert (
        " ".join(process_cmd[1:])
        == "-m pytest -q --durations=15 tests --ignore=tests/a_test.py --ignore=tests/b"
    )
    assert (
        " ".join(in_process_cmd[1:])
        == "-m pytest -q --durations=15 -p no:cacheprovider tests/a_test.py tests/b"
    )


def test_either_lane_failing_fails_the_run() -> None:
    assert lanes.combined_status(0, 0) == 0
    assert lanes.combined_status(1, 0) == 1
    assert lanes.combined_status(0, 1) == 1
    assert lanes.combined_status(2, 1) == 2


def test_a_test_with_a_busy_child_is_told_to_leave_the_in_process_lane() -> None:
    assert lanes.check_in_process("tests/x/test_y.py::test_z", 0.2) is None
    message = lanes.check_in_process("tests/x/test_y.py::test_z", 3.0)
    assert message is not None
    assert "3.0 CPU seconds in child processes" in message
    assert "remove 'tests/x/test_y.py'" in message and "IN_PROCESS" in message


_INNER = """
import subprocess, sys

BUSY = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 1.5: pass"


def test_in_process():
    assert 1 + 1 == 2


def test_short_helper_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_busy_child():
    subprocess.run([sys.executable, "-c", BUSY], check=True)
"""


def test_both_lanes_run_at_once_and_the_in_process_lane_refuses_busy_children(tmp_path: Path) -> None:
    # A checkout of its own: tests/test_launches.py for the process lane, tests/quick/ for the other.
    tests = tmp_path / "tests"
    (tests / "quick").mkdir(parents=True)
    (tests / "conftest.py").write_text('pytest_plugins = ["tests.helpers.lanes"]\n')
    (tests / "test_launches.py").write_text(_INNER.replace("def test_busy_child", "def test_busy_child_here"))
    (tests / "quick" / "test_quick.py").write_text(_INNER)
    (tests / "quick" / "test_pool.py").write_text(
        "from tests.helpers.pool import WorkerPool\n\n\ndef test_pool():\n    WorkerPool(2)._start()\n"
    )
    code = (
        "import sys; from pathlib import Path; from tests.helpers import lanes; "
        f"sys.exit(lanes.run(['-q'], ['tests/quick'], Path({str(tmp_path)!r})))"
    )
    env = {k: v for k, v in os.environ.items() if k != lanes.LANE_VARIABLE}
    env["PYTHONPATH"] = os.pathsep.join([str(_ROOT), env.get("PYTHONPATH", "")])
    # The inner sessions import the helper from this checkout: tmp_path's tests/ holds no package.
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    process_part, _, in_process_part = out.partition("---- in-process lane (1 paths")
    # The process lane ran its file only, busy child and all; the in-process lane its folder only.
    assert "3 passed" in process_part and "test_quick" not in process_part, out
    # The busy child's test is an error at its teardown, where the children's CPU time is read; a
    # process pool refuses to start there.
    assert "1 failed, 3 passed, 1 error" in in_process_part, out
    assert "ERROR tests/quick/test_quick.py::test_busy_child" in in_process_part, out
    assert "started a 2-process pool: remove its file from IN_PROCESS" in in_process_part, out
    assert "remove 'tests/quick/test_quick.py' (or its folder) from IN_PROCESS" in in_process_part, out
