"""The collective slot and the per-rank hang watchdog (accelerate.diagnostics.watchdog).

The watchdog runs for real on its own thread; a test gives it a short timeout, a real key-value
store (torch's HashStore) where peers would be, and an exit function that records the status
instead of ending the test process.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from accelerate.diagnostics import rank_report
from accelerate.diagnostics.watchdog import (
    HANG_EXIT_CODE,
    SLOT,
    CollectiveSlot,
    Watchdog,
    flight_recorder_lines,
)
from tests.conftest import WorkerPool


def test_the_slot_records_the_innermost_collective_and_restores_the_outer_one() -> None:
    slot = CollectiveSlot()
    outer, inner = torch.ones(2), torch.ones(3)
    with slot.enter("gather_for_metrics", outer):
        with slot.enter("gather", inner):
            assert (slot.operation, slot.data, slot.count) == ("gather", inner, 2)
        assert (slot.operation, slot.data) == ("gather_for_metrics", outer)
        assert slot.thread == threading.get_ident()
    assert slot.operation is None and slot.data is None  # nothing kept alive after the collective
    assert slot.count == 2


def test_the_slot_is_left_when_the_collective_raises() -> None:
    slot = CollectiveSlot()
    with pytest.raises(RuntimeError), slot.enter("reduce", torch.ones(1)):
        raise RuntimeError("connection closed")
    assert slot.operation is None


class _Ended:
    """Stands in for os._exit: records the status and lets the "stuck" code return."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.event = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.event.set()


def stuck_here(ended: _Ended) -> None:
    # The "hung" main thread: waits until the watchdog has reported and "ended the process".
    if not ended.event.wait(60):
        raise AssertionError("the watchdog never fired")


def _watchdog(tmp_path: Path, ended: _Ended, store: Any = None, world_size: int = 1) -> Watchdog:
    return Watchdog(
        rank=0,
        world_size=world_size,
        timeout=timedelta(seconds=0.4),
        report_dir=str(tmp_path),
        poll_s=0.05,
        store=lambda: store,
        exit=ended,
    )


def _report(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "rank_0.json").read_text())
    return data


def test_a_collective_waiting_past_the_deadline_is_reported_with_its_shapes_and_caller(
    tmp_path: Path,
) -> None:
    ended = _Ended()
    watchdog = _watchdog(tmp_path, ended)
    SLOT.reset()
    watchdog.start()
    try:
        with SLOT.enter("gather", {"logits": torch.zeros(4, 3), "ids": torch.ones(4, dtype=torch.int64)}):
            stuck_here(ended)
    finally:
        watchdog.stop()
        SLOT.reset()
    assert ended.codes == [HANG_EXIT_CODE]
    report = _report(tmp_path)
    assert report["reason"] == "timeout" and report["operation"] == "gather"
    assert report["shapes"] == ["(4, 3):float32", "(4,):int64"]
    assert report["waited_s"] >= watchdog.deadline_s
    assert report["where"]["function"] == "stuck_here"
    assert report["where"]["file"] == __file__
    assert "in stuck_here" in report["stack"]
    assert report["timeout_s"] == pytest.approx(0.4)


def test_a_rank_outside_any_collective_reports_when_a_peer_raised_the_flag(tmp_path: Path) -> None:
    store = dist.HashStore()
    store.set("accelerate/watchdog/trigger", "1")  # rank 1 found the hang
    store.set("accelerate/watchdog/done/1", "1")
    ended = _Ended()
    watchdog = _watchdog(tmp_path, ended, store=store, world_size=2)
    SLOT.reset()
    watchdog.start()
    try:
        stuck_here(ended)
    finally:
        watchdog.stop()
    report = _report(tmp_path)
    assert report["reason"] == "peer" and report["operation"] is None
    assert report["where"]["function"] == "stuck_here"
    assert store.check(["accelerate/watchdog/done/0"])
    line = rank_report.format_rank_line(report)
    assert line.startswith("rank 0 is in no accelerate collective") and "in stuck_here()" in line


def test_the_rank_that_finds_the_hang_raises_the_flag_for_its_peers(tmp_path: Path) -> None:
    store = dist.HashStore()
    store.set("accelerate/watchdog/done/1", "1")  # the peer has already answered
    ended = _Ended()
    watchdog = _watchdog(tmp_path, ended, store=store, world_size=2)
    SLOT.reset()
    watchdog.start()
    try:
        with SLOT.enter("wait_for_everyone"):
            stuck_here(ended)
    finally:
        watchdog.stop()
        SLOT.reset()
    assert store.get("accelerate/watchdog/trigger") == b"0"
    assert store.check(["accelerate/watchdog/done/0"])
    assert _report(tmp_path)["operation"] == "wait_for_everyone"


def test_a_stopped_watchdog_does_not_fire(tmp_path: Path) -> None:
    ended = _Ended()
    watchdog = _watchdog(tmp_path, ended)
    watchdog.start()
    watchdog.stop()
    with SLOT.enter("gather"):
        assert not ended.event.wait(1.0)  # well past the 0.3 s deadline
    SLOT.reset()
    assert ended.codes == [] and not (tmp_path / "rank_0.json").exists()


def test_the_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout"):
        Watchdog(rank=0, world_size=2, timeout=timedelta(0))


def test_the_flight_recorder_is_only_read_when_torch_keeps_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    monkeypatch.delenv("TORCH_NCCL_TRACE_BUFFER_SIZE", raising=False)
    assert flight_recorder_lines() == []


def test_the_flight_recorder_reads_nccls_own_recorder_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # CUDA builds keep NCCL collectives in ProcessGroupNCCL's own recorder, not in the generic one.
    import torch._C._distributed_c10d as c10d

    def dump(entries: list[dict[str, Any]]) -> Any:
        return lambda *args: json.dumps({"entries": entries})

    gloo = {"collective_seq_id": 1, "profiling_name": "gloo:broadcast", "time_created_ns": 1, "retired": True}
    nccl = {"collective_seq_id": 7, "profiling_name": "nccl:all_reduce", "time_created_ns": 2, "state": "started",
            "input_sizes": [[4]], "output_sizes": [[4]]}  # fmt: skip
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "10")
    monkeypatch.setattr(c10d, "_dump_fr_trace_json", dump([gloo]), raising=False)
    monkeypatch.setattr(c10d, "_dump_nccl_trace_json", dump([nccl]), raising=False)
    lines = flight_recorder_lines()
    assert len(lines) == 2 and lines[0].startswith("#1 gloo:broadcast")
    assert lines[1] == "#7 nccl:all_reduce in [[4]] out [[4]]: started"


def test_shapes_of_nested_structures() -> None:
    data = {"a": [torch.zeros(2, 2), (torch.ones(3, dtype=torch.bfloat16),)], "b": "text"}
    assert rank_report.describe_shapes(data) == ["(2, 2):float32", "(3,):bfloat16"]
    assert rank_report.describe_shapes(None) == []


def _watchdog_facts() -> dict[str, Any]:
    from accelerate import PartialState
    from accelerate.diagnostics import watchdog
    from accelerate.utils import gather, reduce

    if dist.is_initialized():  # an earlier test's group may carry its own timeout; start over
        dist.destroy_process_group()
    PartialState()
    before = SLOT.count
    gather(torch.ones(2))
    reduce(torch.ones(2))
    current = watchdog._CURRENT
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    return {
        "entered": SLOT.count - before,
        "left": SLOT.operation is None,
        "running": current is not None and current._thread is not None and current._thread.is_alive(),
        "watchdog_timeout_s": current.timeout_s if current is not None else None,
        "group_timeout_s": backend.options._timeout.total_seconds(),
    }


def test_a_group_made_without_a_timeout_gets_ten_minutes_and_every_rank_a_watchdog(pool2: WorkerPool) -> None:
    from tests.helpers.pool import free_port

    for facts in pool2.run(_watchdog_facts, env={"MASTER_PORT": str(free_port())}):
        assert facts == {
            "entered": 2,  # gather and reduce entered the slot, and left it
            "left": True,
            "running": True,
            "watchdog_timeout_s": 600.0,
            "group_timeout_s": 600.0,  # gloo's own default would be 1800
        }
