"""Every code block of the documentation runs as written (see tests/docs/snippets.py for the markers).

Python blocks run in a fresh interpreter, blocks marked ``launch`` through ``accelerate launch`` on
several CPU processes, shell blocks marked ``run`` with bash; each page in its own temporary folder,
with this checkout's ``src`` first on the path. Translated pages must carry the English page's blocks
unchanged, so they are compared rather than run again.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from accelerate.utils.ports import port_is_free
from tests.docs.snippets import REPO, Block, english_pages, parse, translations

TIMEOUT_S = 120
_STARTS_PROCESSES = ("accelerate launch", "accelerate test", "notebook_launcher(", "debug_launcher(")
DEFAULT_PORT = 29500
# Blocks that need 29500 itself: notebook_launcher's default use_port="29500" is not a free one (with
# 29500 taken it refuses to start), and a launch given --main_process_port 29500 checks that it is free.
_NEEDS_THE_DEFAULT_PORT = ("notebook_launcher(", str(DEFAULT_PORT))


class LaunchTurns:
    """When a block that starts several processes may run, beside which others.

    `accelerate launch` (and `accelerate test`) rendezvous on 29500 unless it is taken, then on a free
    port of their own; two launches starting at once could both find 29500 free and collide there. So
    while such blocks run this runner holds 29500 itself (bound, not listening): each launch then
    takes its own free port, as it would on a machine where 29500 is busy, and launches of different
    pages run side by side; the pages' text stays as shown. A block ``alone`` (one that needs 29500
    itself) waits for the others, runs with the port released, and keeps the others waiting. Where
    29500 cannot be held (another program has it and may free it at any moment), blocks run one at
    a time, as an ``alone`` one does.
    """

    def __init__(self, port: int = DEFAULT_PORT) -> None:
        self._port = port
        self._changed = threading.Condition()
        self._running = 0
        self._alone_waiting = 0
        self._alone_running = False
        self._held: socket.socket | None = None

    @contextlib.contextmanager
    def turn(self, *, alone: bool) -> Iterator[None]:
        with self._changed:
            self._alone_waiting += alone
            self._changed.wait_for(lambda: self._may_start(alone))
            self._alone_waiting -= alone
            self._alone_running = alone
            self._running += 1
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._alone_running = False
                if self._running == 0:
                    self._release()
                self._changed.notify_all()

    def _may_start(self, alone: bool) -> bool:
        if not alone and self._alone_waiting:
            return False  # an `alone` block goes first once the running ones are done
        if self._running == 0:
            if not alone:
                self._hold()  # where it cannot, this block runs alone all the same
            return True
        if alone or self._alone_running:
            return False
        return self._held is not None  # others run beside it only while 29500 is held

    def _hold(self) -> bool:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("", self._port))  # no SO_REUSEADDR: the launchers' own probe cannot bind it
        except OSError:
            sock.close()
            return False
        self._held = sock
        return True

    def _release(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None


_TURNS = LaunchTurns()


def _env(folder: Path) -> dict[str, str]:
    env = dict(os.environ)
    # No config file of the machine's user (`accelerate config`) may change what a page shows.
    env["HF_HOME"] = str(folder / ".hf_home")
    env.pop("ACCELERATE_CONFIG_FILE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    # `accelerate` and `python` in shell blocks are this interpreter's.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _command(block: Block, folder: Path) -> list[str]:
    if block.is_shell:
        return ["bash", "-euo", "pipefail", "-c", block.code]
    script = folder / f"snippet_line{block.line}.py"
    script.write_text(block.code, encoding="utf-8")
    if "launch" in block.markers:
        accelerate = str(Path(sys.executable).parent / "accelerate")
        return [accelerate, "launch", *shlex.split(block.markers["launch"]), script.name]
    return [sys.executable, script.name]


def _run_page(page: Path, folder: Path) -> str | None:
    """Runs the page's blocks in order; the first failure as a message, or None."""
    env = _env(folder)
    for block in parse(page):
        block.check()
        if "file" in block.markers:
            target = folder / block.markers["file"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code, encoding="utf-8")
            continue
        if not block.runs:
            continue
        several = "launch" in block.markers or any(start in block.code for start in _STARTS_PROCESSES)
        alone = any(start in block.code for start in _NEEDS_THE_DEFAULT_PORT)
        try:
            with _TURNS.turn(alone=alone) if several else contextlib.nullcontext():
                done = subprocess.run(
                    _command(block, folder),
                    cwd=folder,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=TIMEOUT_S,
                )
        except subprocess.TimeoutExpired as exc:
            return f"{block.where}: still running after {TIMEOUT_S} s\n{exc.stdout}\n{exc.stderr}"
        if done.returncode != 0:
            return (
                f"{block.where}: exit {done.returncode}\n--- block ---\n{block.code}"
                f"--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}"
            )
    return None


def _cost(page: Path) -> int:
    """About how long a page's code runs, counted in interpreter starts (each imports torch): one per
    python block or shell command, three for a launch (the launcher and two processes)."""
    cost = 0
    for block in parse(page):
        if not block.runs:
            continue
        if block.is_python:
            starts = any(start in block.code for start in _STARTS_PROCESSES) or "launch" in block.markers
            cost += 3 if starts else 1
            continue
        for command in block.code.replace("\\\n", " ").splitlines():
            if command.startswith(("accelerate launch", "accelerate test")) and "--dry_run" not in command:
                cost += 3
            elif command.startswith(("accelerate", "python")):
                cost += 1
    return cost


@pytest.fixture(scope="module")
def page_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Every selected page's code, started at once on a few threads (DOCS_SNIPPET_JOBS, default 2).

    The pages are independent (each in its own folder; blocks that start several processes take turns
    on the rendezvous port, see LaunchTurns), so one page's blocks run beside another page's.
    """
    selected = [
        item.callspec.params["page"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_page_code_runs"
    ]
    jobs = int(os.environ.get("DOCS_SNIPPET_JOBS", "2"))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        # The longest pages first: one that started last would finish last, alone on its thread.
        futures = {
            page: pool.submit(_run_page, page, tmp_path_factory.mktemp(page.stem))
            for page in sorted(selected, key=_cost, reverse=True)
        }
        yield futures
        for future in futures.values():
            future.cancel()


def test_launch_turns_hold_the_port_while_launches_run_side_by_side() -> None:
    with socket.socket() as probe:  # a port nothing else uses, standing in for 29500
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    turns = LaunchTurns(port)
    order: list[str] = []
    both_in = threading.Barrier(2, timeout=10)

    def launch(name: str, *, alone: bool) -> None:
        with turns.turn(alone=alone):
            order.append(f"{name} starts, port free: {port_is_free(port)}")
            if not alone:
                both_in.wait()  # fails unless the two launches run at the same time
            order.append(f"{name} ends")

    threads = [threading.Thread(target=launch, args=(name,), kwargs={"alone": False}) for name in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    launch("notebook", alone=True)
    assert sorted(order[:2]) == ["a starts, port free: False", "b starts, port free: False"], order
    assert order[4:] == ["notebook starts, port free: True", "notebook ends"], order
    assert port_is_free(port)  # released once no launch runs


def _pages_with_code() -> list[Path]:
    return [p for p in english_pages() if any(b.runs or "file" in b.markers for b in parse(p))]


def test_every_block_says_how_it_runs() -> None:
    errors = []
    for page in english_pages() + [t for t, _ in translations()]:
        for block in parse(page):
            try:
                block.check()
            except ValueError as exc:
                errors.append(str(exc))
    assert not errors, "\n".join(errors)


def test_every_python_block_compiles() -> None:
    """Blocks that are only written to a file or not run at all are still valid Python."""
    errors = []
    for page in english_pages():
        for block in parse(page):
            if block.is_python:
                try:
                    compile(block.code, block.where, "exec")
                except SyntaxError as exc:
                    errors.append(f"{block.where}: {exc}")
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("page", _pages_with_code(), ids=lambda p: str(p.relative_to(REPO / "docs")))
def test_page_code_runs(page: Path, page_runs: dict) -> None:
    error = page_runs[page].result()
    if error:
        pytest.fail(error, pytrace=False)


@pytest.mark.parametrize("pair", translations(), ids=lambda pair: str(pair[0].relative_to(REPO / "docs")))
def test_translation_has_the_english_code(pair: tuple[Path, Path]) -> None:
    translated, english = pair
    assert english.exists(), f"{translated} translates {english}, which does not exist"

    def code(page: Path) -> list[tuple[str, str, dict[str, str]]]:
        return [(b.lang, b.code, b.markers) for b in parse(page) if b.runs or b.markers or b.is_shell]

    assert code(translated) == code(english), (
        f"{translated.name}: its code blocks (and their markers) must be those of {english.name}, unchanged"
    )
