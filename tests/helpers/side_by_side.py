"""Commands a test module starts together in the background, each test then reading its own result.

A 2-process ``accelerate launch`` spends much of its wall time waiting (interpreters starting,
rendezvous, a restart's teardown) while the cores idle, so a module whose tests each launch a
different script gets through them sooner by starting the launches side by side: each keeps its own
folder, port and output files, and each test still asserts on exactly its own run.

Only the launches of the tests this session selected are started (``selected``), so ``pytest -k``
on one test costs one launch. Timeouts only stop a run that would hang forever.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterable, Mapping, Sequence
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
