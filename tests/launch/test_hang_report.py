"""The launcher's hang summary (accelerate.launch.hang_report) from the reports ranks write."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from accelerate.diagnostics.rank_report import HANG_EXIT_CODE, write_report
from accelerate.launch.hang_report import (
    HANG_REPORT_DIR_ENV,
    NCCL_DUMP_PREFIX,
    hang_env,
    read_nccl_dumps,
    read_reports,
    report_hang,
    summarize,
)


def _report(rank: int, operation: str | None, function: str, **extra: Any) -> dict[str, Any]:
    return {
        "rank": rank,
        "pid": 100 + rank,
        "host": "node",
        "reason": "timeout" if operation else "peer",
        "operation": operation,
        "shapes": ["(8,):float32"] if operation else [],
        "waited_s": 45.2 if operation else None,
        "collective": 7,
        "step": 3,
        "timeout_s": 60.0,
        "where": {"file": "train.py", "line": 40 + rank, "function": function},
        "thread": "MainThread",
        "stack": f'  File "train.py", line {40 + rank}, in {function}\n',
        "flight_recorder": [],
        **extra,
    }


def test_the_summary_names_who_waits_where_and_who_is_missing() -> None:
    reports = {0: _report(0, "gather", "main"), 1: _report(1, None, "stuck_here")}
    text = summarize(reports, [0, 1, 2], {})
    assert "(process-group timeout 60 s; rank 0 gave up after 45 s)" in text
    assert (
        "  waiting: rank 0 waits in `gather` (accelerate collective #7, step 3) with [(8,):float32] for 45 s, "
        "called at train.py:40 in main()"
    ) in text
    assert (
        "  missing: rank 1 is in no accelerate collective (it finished #7, step 3); it is at train.py:41 in stuck_here()"
        in text
    )
    assert "  missing: rank 2 sent no report" in text
    # The missing rank's stack comes first: it is the one to look at.
    assert text.index("rank 1 (pid 101 on node)") < text.index("rank 0 (pid 100 on node)")
    assert "different collectives" not in text


def test_ranks_in_different_collectives_are_called_out() -> None:
    reports = {0: _report(0, "gather", "main"), 1: _report(1, "reduce", "main", collective=8)}
    text = summarize(reports, [0, 1], {})
    assert "the ranks are in different collectives: rank 0 in `gather` (#7), rank 1 in `reduce` (#8)" in text


def test_reports_are_read_back_and_only_the_latest_restart_attempt_counts(tmp_path: Path) -> None:
    write_report(_report(0, "gather", "main", attempt=0), str(tmp_path))
    write_report(_report(1, None, "stuck_here", attempt=1), str(tmp_path))
    (tmp_path / "rank_2.json").write_text("{not json")  # a torn file is skipped
    assert list(read_reports(str(tmp_path))) == [1]


def _failure(attempt: int) -> SimpleNamespace:
    return SimpleNamespace(
        exitcode=124, pid=1, error_file=f"/tmp/torchelastic_x/none_y/attempt_{attempt}/0/error.json"
    )


def test_report_hang_prints_and_returns_the_hang_status_only_when_there_are_reports(tmp_path: Path) -> None:
    out = io.StringIO()
    failures = {0: _failure(0), 1: _failure(0)}
    assert report_hang(str(tmp_path), failures, out) is None and out.getvalue() == ""
    write_report(_report(0, "gather", "main"), str(tmp_path))
    assert report_hang(str(tmp_path), failures, out) == HANG_EXIT_CODE
    assert "accelerate launch: hang detected" in out.getvalue()


def test_a_hang_of_an_earlier_restart_attempt_does_not_explain_a_later_failure(tmp_path: Path) -> None:
    write_report(_report(0, "gather", "main", attempt=0), str(tmp_path))
    out = io.StringIO()
    assert report_hang(str(tmp_path), {1: _failure(1)}, out) is None and out.getvalue() == ""


def test_nccl_flight_recorder_dumps_are_listed(tmp_path: Path) -> None:
    # The layout torch's flight recorder dumps (pickle by default; JSON also accepted).
    entries = [
        {"collective_seq_id": 4, "profiling_name": "nccl:all_reduce", "input_sizes": [[8]],
         "output_sizes": [[8]], "state": "completed", "retired": True},
        {"collective_seq_id": 5, "profiling_name": "nccl:all_gather", "input_sizes": [[4, 3]],
         "output_sizes": [[2, 4, 3]], "state": "started", "retired": False},
    ]  # fmt: skip
    (tmp_path / f"{NCCL_DUMP_PREFIX}0").write_bytes(pickle.dumps({"version": "2.10", "entries": entries}))
    (tmp_path / f"{NCCL_DUMP_PREFIX}1").write_text(json.dumps({"entries": entries[:1]}))
    (tmp_path / f"{NCCL_DUMP_PREFIX}x").write_text("ignored")
    dumps = read_nccl_dumps(str(tmp_path))
    assert dumps == {
        0: [
            "#4 nccl:all_reduce in [[8]] out [[8]]: completed",
            "#5 nccl:all_gather in [[4, 3]] out [[2, 4, 3]]: started",
        ],
        1: ["#4 nccl:all_reduce in [[8]] out [[8]]: completed"],
    }
    text = summarize({}, [0, 1], dumps)
    assert "rank 0: torch's NCCL flight recorder (last collectives):" in text
    assert "missing: rank 0 sent no report" in text


def test_hang_env_sets_the_report_folder_and_keeps_the_users_torch_settings(tmp_path: Path) -> None:
    env = hang_env(str(tmp_path), {"TORCH_FR_BUFFER_SIZE": "50"})
    assert env[HANG_REPORT_DIR_ENV] == str(tmp_path)
    assert "TORCH_FR_BUFFER_SIZE" not in env  # the user's own value stays
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == str(tmp_path / NCCL_DUMP_PREFIX)
