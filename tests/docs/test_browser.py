"""The built site works in a real browser: headless Chromium loads pages over HTTP and runs their scripts.

The strict build (test_site.py) checks links and rendering at the Markdown level; this checks what a
reader gets: Material's JavaScript runs (it adds a copy button to every code block), the language
switcher leads to the translated page, and the generated reference is there. Skipped when no
Chromium binary is installed (`make test` does not install one) or the docs extra is missing.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

_CANDIDATES = (
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
    "chrome",
    "headless_shell",
)


def _chromium() -> str | None:
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit
    return next((path for name in _CANDIDATES if (path := shutil.which(name))), None)


@pytest.fixture(scope="module")
def browser() -> str:
    binary = _chromium()
    if binary is None:
        pytest.skip("no Chromium binary found (set CHROMIUM=/path/to/chromium to use another)")
    return binary


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _dom(browser: str, url: str, tmp_path: Path) -> str:
    """The page's DOM after its scripts ran (``--dump-dom`` waits for the load event)."""
    done = subprocess.run(
        [
            browser,
            "--headless=new",
            "--no-sandbox",  # root in containers and CI
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"chromium failed on {url}:\n{done.stderr[-3000:]}"
    return done.stdout


def test_english_quick_tour_runs_its_scripts(browser: str, server: str, tmp_path: Path) -> None:
    dom = _dom(browser, f"{server}/get-started/quick-tour/", tmp_path)
    assert "Quick tour" in dom
    assert "md-code__button" in dom, (
        "Material's JavaScript did not run (it adds a copy button to each code block)"
    )
    for lang in ("zh", "hi"):
        assert f'hreflang="{lang}"' in dom, f"the language switcher has no {lang} entry"


def test_translated_pages_and_fallback(browser: str, server: str, tmp_path: Path) -> None:
    zh = _dom(browser, f"{server}/zh/get-started/quick-tour/", tmp_path)
    assert "快速上手" in zh and 'lang="zh"' in zh
    hi = _dom(browser, f"{server}/hi/tutorials/distributed-training/", tmp_path)
    assert "डिस्ट्रिब्यूटेड ट्रेनिंग" in hi and 'lang="hi"' in hi
    fallback = _dom(browser, f"{server}/hi/how-to/hang-diagnosis/", tmp_path)
    assert "Diagnose a hang" in fallback  # an untranslated page shows the English text


def test_generated_cli_reference_in_the_browser(browser: str, server: str, tmp_path: Path) -> None:
    dom = _dom(browser, f"{server}/reference/cli/", tmp_path)
    assert "--num_processes" in dom and "<table>" in dom
