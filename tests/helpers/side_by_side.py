"""Commands a test module starts together in the background, each test then reading its own result.

A 2-process ``accelerate launch`` spends much of its wall time waiting (interpreters starting,
rendezvous, a restart's teardown) while the cores idle, so a module whose tests each launch a
different script gets through them sooner by starting the launches side by side: each keeps its own
folder, port and output files, and each test still asserts on exactly its own run.

Only the launches of the tests this session selected are started (``selected``), so ``pytest -k``
on one test costs one launch. Timeouts only stop a run that would hang forever.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager as ContextManager
from pathlib import Path

import pytest


def selected(request: pytest.FixtureRequest, cases_of_test: Mapping[str, Iterable[str]]) -> set[str]:
    """The cases (of ``cases_of_test``: test name -> the cases it reads) this session's tests read."""
    cases: set[str] = set()
    for item in request.session.items:
        name = getattr(item, "originalname", None)
        if name in cases_of_test:
            cases.update(cases_of_test[name])
    return cases


class BackgroundRun:
    """One command running in the background, its stdout and stderr in files of its own folder."""

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        folder: Path,
        env: Mapping[str, str],
        timeout: float,
        cwd: Path | None = None,
    ) -> None:
        self.folder = folder
        self._timeout = timeout
        self._result: subprocess.CompletedProcess[str] | None = None
        folder.mkdir(parents=True, exist_ok=True)
        self._out = (folder / "stdout").open("w")
        self._err = (folder / "stderr").open("w")
        # A session of its own: stop() ends the launcher's workers with it, not just the launcher.
        self.proc = subprocess.Popen(
            list(cmd), env=dict(env), cwd=cwd, stdout=self._out, stderr=self._err, text=True,
            start_new_session=True,
        )  # fmt: skip

    def result(self) -> subprocess.CompletedProcess[str]:
        """Waits for the command (at most its timeout) and returns what it wrote, as subprocess.run would."""
        if self._result is None:
            try:
                code = self.proc.wait(timeout=self._timeout)
            finally:
                self._out.close()
                self._err.close()
            out, err = ((self.folder / name).read_text() for name in ("stdout", "stderr"))
            self._result = subprocess.CompletedProcess(self.proc.args, code, out, err)
        return self._result

    def stop(self) -> None:
        """Ends a command still running (a failed test's, or one no test read) and closes its files."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._out.close()
        self._err.close()


# What a case's command is, given its folder (for its files and HF_HOME) and its reserved port.
CommandOf = Callable[[Path, int], tuple[list[str], dict[str, str]]]


class SideBySide:
    """Runs of a test module's cases, at most ``at_once`` at a time, each started ahead of its test.

    ``result(name)`` starts that case if it is still waiting, fills the free places with the next
    waiting cases (in the order they were added: the tests' order), then waits for it. Each case has
    its own folder under ``root`` and its own port (from ``reserve_port``, held until ``close()``). A case
    that fails to start (its command function raised) while started ahead fails its own test.
    """

    def __init__(
        self, root: Path, *, at_once: int, timeout: float, reserve_port: Callable[[], ContextManager[int]]
    ) -> None:
        if at_once < 1:
            raise ValueError(f"SideBySide(at_once={at_once}) must run at least one case at a time")
        self._root = root
        self._at_once = at_once
        self._timeout = timeout
        self._waiting: dict[str, CommandOf] = {}
        self._runs: dict[str, BackgroundRun] = {}
        self._could_not_start: dict[str, Exception] = {}
        self._reserve_port = reserve_port
        self._ports = contextlib.ExitStack()

    def add(self, name: str, command_of: CommandOf) -> None:
        if name in self._waiting or name in self._runs or name in self._could_not_start:
            raise ValueError(f"SideBySide.add({name!r}): a case of that name was already added")
        self._waiting[name] = command_of

    def folder(self, name: str) -> Path:
        """The folder of case ``name``: its files, HF_HOME and output files."""
        return self._root / name

    def result(self, name: str) -> subprocess.CompletedProcess[str]:
        if name in self._could_not_start:  # started ahead for another test: the failure is this test's
            raise self._could_not_start[name]
        if name not in self._waiting and name not in self._runs:
            raise KeyError(f"SideBySide.result({name!r}): no such case; add() it in the module's fixture")
        if name in self._waiting:
            self._start(name)
        self._fill()
        return self._runs[name].result()

    def close(self) -> None:
        for run in self._runs.values():
            run.stop()
        self._ports.close()

    def _start(self, name: str) -> None:
        folder = self.folder(name)
        folder.mkdir(parents=True, exist_ok=True)
        port = self._ports.enter_context(self._reserve_port())
        command_of = self._waiting.pop(name)
        cmd, env = command_of(folder, port)
        self._runs[name] = BackgroundRun(cmd, folder=folder / "logs", env=env, timeout=self._timeout)

    def _fill(self) -> None:
        running = sum(run.proc.poll() is None for run in self._runs.values())
        for name in list(self._waiting)[: max(0, self._at_once - running)]:
            try:
                self._start(name)
            except Exception as exc:  # noqa: BLE001 - raised again by result(name), in its own test
                self._could_not_start[name] = exc


@contextlib.contextmanager
def selected_runs(
    request: pytest.FixtureRequest,
    root: Path,
    commands: Mapping[str, CommandOf],
    cases_of_test: Mapping[str, Iterable[str]],
    *,
    at_once: int,
    timeout: float,
    reserve_port: Callable[[], ContextManager[int]],
) -> Iterator[SideBySide]:
    """A module's :class:`SideBySide` holding those of ``commands`` (in their order: the tests') that
    this session's selected tests read (``cases_of_test``, see :func:`selected`); closed on exit."""
    runs = SideBySide(root, at_once=at_once, timeout=timeout, reserve_port=reserve_port)
    wanted = selected(request, cases_of_test)
    for name, command in commands.items():
        if name in wanted:
            runs.add(name, command)
    try:
        yield runs
    finally:
        runs.close()
