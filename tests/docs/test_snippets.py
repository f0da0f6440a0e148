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
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.docs.snippets import REPO, Block, english_pages, parse, translations

TIMEOUT_S = 120
# Blocks that start several processes take a rendezvous port (29500 unless it is busy); two of them
# starting at once could both pick it, so they run one at a time while other blocks go on beside them.
_MULTI_PROCESS = threading.Lock()
_STARTS_PROCESSES = ("accelerate launch", "accelerate test", "notebook_launcher(", "debug_launcher(")


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
        try:
            with _MULTI_PROCESS if several else contextlib.nullcontext():
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


@pytest.fixture(scope="module")
def page_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Every selected page's code, started at once on a few threads (DOCS_SNIPPET_JOBS, default 2).

    The pages are independent (each in its own folder; blocks that start several processes take turns,
    see _MULTI_PROCESS), so a page's single-process blocks run beside another page's launch.
    """
    selected = [
        item.callspec.params["page"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_page_code_runs"
    ]
    jobs = int(os.environ.get("DOCS_SNIPPET_JOBS", "2"))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {
            page: pool.submit(_run_page, page, tmp_path_factory.mktemp(page.stem)) for page in selected
        }
        yield futures
        for future in futures.values():
            future.cancel()


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
