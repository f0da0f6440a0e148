"""The exit teardown's parts, in this process (the launched end-to-end runs are in test_exit.py)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelerate.state import teardown
from accelerate.storage import durable_io, verified_read


@pytest.fixture
def registry() -> Iterator[None]:
    """Keeps what the library registered (durable_io's stopper) across a test that adds its own."""
    stoppers, releasers = list(teardown._STOPPERS), list(teardown._RELEASERS)
    yield
    teardown._STOPPERS[:] = stoppers
    teardown._RELEASERS[:] = releasers


def test_stoppers_run_newest_first_and_failures_do_not_stop_the_rest(
    registry: None, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    def failing() -> None:
        calls.append("failing")
        raise OSError("disk gone")

    teardown._STOPPERS.clear()
    teardown.on_shutdown(lambda: calls.append("first"))
    teardown.on_shutdown(failing)
    teardown.on_shutdown(failing)  # registering twice runs it once
    teardown.stop_background_work()
    assert calls == ["failing", "first"]
    err = capsys.readouterr().err
    assert "stopping background work" in err and "OSError: disk gone" in err


def test_release_at_exit_holds_owners_weakly(registry: None) -> None:
    class Holder:
        pass

    released: list[Holder] = []
    alive, gone = Holder(), Holder()
    teardown.release_at_exit(alive, released.append)
    teardown.release_at_exit(gone, released.append)
    del gone
    gc.collect()
    teardown.release_holders()
    assert released == [alive]
    teardown.release_holders()  # each owner is released once
    assert released == [alive]


def test_deadline_gives_up_on_a_stuck_step(capsys: pytest.CaptureFixture[str]) -> None:
    unblock = threading.Event()
    teardown._run_with_deadline(unblock.wait, 0.05)  # returns without waiting for the step
    assert "did not shut down within" in capsys.readouterr().err
    unblock.set()
    # The abandoned helper ends once unblocked; wait for it, or the next test sees it still running.
    for thread in [t for t in threading.enumerate() if t.name == "accelerate-teardown"]:
        thread.join(5)


def test_deadline_leaves_no_helper_thread_behind_a_finished_step() -> None:
    # A thread of ours still ending when finalisation begins is what issue 19 is about.
    ran: list[str] = []
    teardown._run_with_deadline(lambda: ran.append("step"), 30)
    assert ran == ["step"]
    assert not [t for t in threading.enumerate() if t.name == "accelerate-teardown"]


def _checksum_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("accelerate-checksum")]


def test_checksum_pool_stops_and_restarts(tmp_path: Path) -> None:
    durable_io.write_bytes(tmp_path / "a.bin", b"x" * (2 * 1024 * 1024))
    assert _checksum_threads()
    teardown.stop_background_work()
    assert not _checksum_threads()
    record = durable_io.write_bytes(tmp_path / "b.bin", b"y" * (2 * 1024 * 1024))  # starts a new pool
    verified_read.verify_file(tmp_path / "b.bin", record)
    teardown.stop_background_work()
