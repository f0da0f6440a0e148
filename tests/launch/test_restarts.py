"""The report printed before torch's agent restarts the processes, and the agent hook's lifetime."""

from __future__ import annotations

import io
import signal
from types import SimpleNamespace

from accelerate.launch.failures import restart_report
from accelerate.launch.restarts import reporting_restarts


def _raised(pid: int, at: float) -> SimpleNamespace:
    text = 'Traceback (most recent call last):\n  File "train.py", line 12, in step\n    loss = f()\nValueError: nan loss\n'
    data = {"message": {"message": "ValueError: nan loss", "extraInfo": {"py_callstack": text, "time": at}}}
    return SimpleNamespace(pid=pid, exitcode=1, error_file_data=data)


def test_the_report_names_the_first_rank_why_and_the_restart() -> None:
    failures = {
        0: SimpleNamespace(pid=100, exitcode=-signal.SIGTERM, error_file_data={}),
        1: SimpleNamespace(pid=101, exitcode=-signal.SIGKILL, error_file_data={}),
    }
    lines = restart_report(failures, {101: 5.0, 100: 6.0}, restart=1, max_restarts=3).splitlines()
    assert "accelerate launch: rank 1 (pid 101) failed with signal SIGKILL (the first to fail)" in lines
    assert any("no Python traceback" in line for line in lines)
    assert any("out-of-memory killer" in line for line in lines)
    assert any(line.startswith("accelerate launch: rank 0 ended with signal SIGTERM") for line in lines)
    assert "accelerate launch: restarting every process (restart attempt 1 of 3, --max_restarts 3)" in lines


def test_a_raised_exception_is_summed_up_by_its_frame_and_message() -> None:
    lines = restart_report({2: _raised(7, 1.0)}, {}, restart=2, max_restarts=2).splitlines()
    assert lines[2] == "accelerate launch: rank 2 (pid 7) failed with exit code 1"
    assert lines[3:5] == ['  File "train.py", line 12, in step', "  ValueError: nan loss"]
    assert "restart attempt 2 of 2" in lines[5]


def test_a_restart_without_failures_says_so() -> None:
    text = restart_report(None, {}, restart=None, max_restarts=1)
    assert "became unhealthy or its membership changed" in text
    assert "accelerate launch: restarting every process\n" in text


def test_the_agent_is_torchs_own_again_after_the_block() -> None:
    import torch.distributed.launcher.api as launcher_api

    original = launcher_api.LocalElasticAgent
    with reporting_restarts(io.StringIO()):
        hooked = launcher_api.LocalElasticAgent
        assert hooked is not original and issubclass(hooked, original)
    assert launcher_api.LocalElasticAgent is original
