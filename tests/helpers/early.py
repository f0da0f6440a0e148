"""Commands that start with the test session, for tests that spend their time waiting on one command.

Some tests run a single subprocess that is asleep nearly all of its life: ClearML's offline session,
for one, waits about ten seconds at close for its forked reporting process while the cores idle. A
test marked ``@pytest.mark.early(start=start)`` has ``start(folder)`` called when the session's first test
sets up, so that its command runs beside the tests before it; the test then reads the result through
the ``early_run`` fixture. Each command gets a folder of its own (its files, its HOME if it wants one)
and stdout/stderr files; commands of deselected or unconditionally skipped tests never start, and any
still running at the end of the session are killed with their process group.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.side_by_side import BackgroundRun

# A test's command, given the (empty) folder that is the test's own.
Start = Callable[[Path], BackgroundRun]


@dataclass(frozen=True)
class EarlyRun:
    """One test's command started with the session, and the folder it was given."""

    folder: Path
    run: BackgroundRun

    def result(self) -> subprocess.CompletedProcess[str]:
        """Waits for the command (at most its timeout) and returns what it wrote, as subprocess.run would."""
        return self.run.result()


def start_of(item: pytest.Item) -> Start | None:
    """The ``early`` marker's start function of ``item``, or None when it has none or always skips."""
    marker = item.get_closest_marker("early")
    if marker is None:
        return None
    # A keyword: pytest takes a mark called with one callable argument for a decorator of that callable.
    start = marker.kwargs.get("start")
    if marker.args or not callable(start):
        raise TypeError(f"{item.nodeid}: use @pytest.mark.early(start=f), f(folder) -> BackgroundRun")
    if item.get_closest_marker("skip") is not None:
        return None
    for skipif in item.iter_markers("skipif"):
        if skipif.args and skipif.args[0] is True or skipif.kwargs.get("condition") is True:
            return None
    return start  # type: ignore[no-any-return]


class EarlyRuns:
    """The session's early commands, by test node id."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._runs: dict[str, EarlyRun] = {}
        self._could_not_start: dict[str, Exception] = {}

    def start_all(self, items: list[pytest.Item]) -> None:
        for item in items:
            try:
                start = start_of(item)
                if start is not None:
                    self._start(item, start)
            except Exception as exc:  # noqa: BLE001 - raised again by get(), in the test it belongs to
                self._could_not_start[item.nodeid] = exc

    def get(self, item: pytest.Item) -> EarlyRun:
        """``item``'s run (every running test's was started by :meth:`start_all`)."""
        if item.nodeid in self._could_not_start:
            raise self._could_not_start[item.nodeid]
        if item.nodeid not in self._runs:
            raise LookupError(f"{item.nodeid} uses early_run without @pytest.mark.early(start=...)")
        return self._runs[item.nodeid]

    def stop_all(self) -> None:
        for early in self._runs.values():
            early.run.stop()

    def _start(self, item: pytest.Item, start: Start) -> None:
        # Named after the test (and numbered: names repeat across modules), for whoever reads a failure.
        name = re.sub(r"[^\w.-]", "_", item.name)[:60]
        folder = self._root / f"{len(self._runs) + len(self._could_not_start)}-{name}"
        folder.mkdir(parents=True)
        self._runs[item.nodeid] = EarlyRun(folder, start(folder))


@pytest.fixture(scope="session", autouse=True)
def _early_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EarlyRuns]:
    runs = EarlyRuns(tmp_path_factory.mktemp("early"))
    try:
        runs.start_all(list(request.session.items))
        yield runs
    finally:
        runs.stop_all()


@pytest.fixture
def early_run(request: pytest.FixtureRequest, _early_runs: EarlyRuns) -> EarlyRun:
    """This test's command (see the module docstring), started with the session."""
    return _early_runs.get(request.node)
