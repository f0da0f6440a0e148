"""durable_io.write_all: several files written at once, results and failures in the jobs' order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from accelerate.storage.durable_io import FileRecord, SyncGroup, save_torch, write_all, write_bytes
from accelerate.storage.verified_read import file_record, verify_file


def test_files_are_written_at_once_and_records_come_back_in_order(tmp_path: Path) -> None:
    sync = SyncGroup()
    both_running = threading.Barrier(2, timeout=10)  # passes only when two writers run together

    def writer(name: str, size: int) -> Callable[[], FileRecord]:
        def job() -> FileRecord:
            both_running.wait()
            return write_bytes(tmp_path / name, bytes([len(name)]) * size, sync=sync)

        return job

    records = write_all([writer("a.bin", 3_000_000), writer("bb.bin", 10)])
    sync.wait()
    assert [r.size for r in records] == [3_000_000, 10]
    for name, record in zip(("a.bin", "bb.bin"), records, strict=True):
        verify_file(tmp_path / name, record)
        assert file_record(tmp_path / name) == record


def test_the_first_failure_in_order_is_raised_after_every_job_ended(tmp_path: Path) -> None:
    ended: list[str] = []

    def slow_ok() -> str:
        time.sleep(0.2)
        ended.append("slow")
        return "slow"

    def fails(message: str) -> str:
        ended.append(message)
        raise OSError(message)

    with pytest.raises(OSError, match="first"):
        write_all([slow_ok, lambda: fails("first"), lambda: fails("second")])
    assert sorted(ended) == ["first", "second", "slow"]  # nothing still writing when it raised


def test_one_job_runs_in_the_callers_thread(tmp_path: Path) -> None:
    here = threading.get_ident()
    assert write_all([threading.get_ident]) == [here]
    record = write_all([lambda: save_torch({"w": torch.ones(3)}, tmp_path / "w.bin")])[0]
    verify_file(tmp_path / "w.bin", record)
