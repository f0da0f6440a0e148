"""A process forked after this one saved (notebook_launcher, debug_launcher) can save too.

The checksum and fsync pools are module-level and start on first use; a fork copies them without
their threads, so a child that handed them work waited forever (found by the elastic test's
reference, whose forked processes saved after earlier tests had saved in the pytest process).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from accelerate.storage import durable_io, verified_read

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def _run_forked(child: object, timeout: float = 30.0) -> int:
    """Runs ``child()`` in a forked process; its exit status (0: it returned), killed after ``timeout``."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            child()  # type: ignore[operator]
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the forked child did not finish within {timeout:.0f}s (a pool without threads?)")


def test_a_forked_child_writes_with_checksums_and_deferred_fsyncs(tmp_path: Path) -> None:
    sync = durable_io.SyncGroup()
    durable_io.write_bytes(tmp_path / "parent.bin", b"x" * (1 << 20), sync=sync)  # both pools start here
    sync.wait()

    def child() -> None:
        group = durable_io.SyncGroup()
        record = durable_io.write_bytes(tmp_path / "child.bin", b"y" * (1 << 20), sync=group)
        group.wait()
        verified_read.verify_file(tmp_path / "child.bin", record)
        durable_io.shutdown_helper()

    assert _run_forked(child) == 0
    assert (tmp_path / "child.bin").stat().st_size == 1 << 20


def test_a_forked_child_does_not_wait_for_the_parents_background_save(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading
    from types import SimpleNamespace

    from accelerate.checkpointing import async_save

    # A save in flight in the parent: its writer thread is still running when the fork happens.
    release = threading.Event()
    writer = threading.Thread(target=release.wait, daemon=True)
    writer.start()
    job = SimpleNamespace(done=threading.Event(), error=None)
    monkeypatch.setattr(async_save, "_CURRENT", (job, writer))
    assert async_save.async_save_in_flight()

    def child() -> None:
        if async_save.async_save_in_flight():  # the parent's, with no writer here: never finishes
            raise SystemExit(3)
        async_save.wait_for_async_save()

    try:
        assert _run_forked(child) == 0
    finally:
        release.set()
        writer.join()
