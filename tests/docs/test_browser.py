"""The built site works in a real browser: headless Chromium loads pages over HTTP and runs their scripts.

The strict build (test_site.py) checks links and rendering at the Markdown level; this checks what a
reader gets: Material's JavaScript runs (it adds a copy button to every code block), the language
switcher leads to the translated page in every language, search finds results on the translated
sites, and the generated reference is there. Skipped when no Chromium binary is installed (`make test`
installs one where it can) or the docs extra is missing.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import select
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_DevTools]:
    """One Chromium for the module: each test opens its pages in tabs of it (a start costs seconds)."""
    binary = _chromium()
    if binary is None:
        pytest.skip("no Chromium binary found (set CHROMIUM=/path/to/chromium to use another)")
    devtools = _DevTools(binary, tmp_path_factory.mktemp("chromium") / "profile")
    try:
        yield devtools
    finally:
        devtools.close()


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


# --no-sandbox: root in containers and CI. --host-resolver-rules: the pages ask fonts.googleapis.com for
# Material's fonts (optional: display=fallback); where DNS cannot answer, each lookup held the load
# event for the resolver's 5 s timeout. Only the local server is reached; every other host fails at once.
_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)


# True once the tab has left about:blank and the page's load event has fired.
_LOADED = "location.href !== 'about:blank' && document.readyState === 'complete'"


def _dom(browser: _DevTools, url: str, ready: str = _LOADED, what: str = "the page to load") -> str:
    """The page's DOM once the JavaScript condition ``ready`` holds (at most 30 s)."""
    dom = browser.wait_for(url, f"(() => {ready} ? document.documentElement.outerHTML : null)()")
    assert dom is not None, f"{url}: waited 30 s for {what}"
    return str(dom)


def test_english_quick_tour_runs_its_scripts(browser: _DevTools, server: str) -> None:
    dom = _dom(
        browser,
        f"{server}/get-started/quick-tour/",
        ready=f"{_LOADED} && document.querySelector('.md-code__button') !== null",
        what="Material's JavaScript, which adds a copy button to each code block",
    )
    assert "Quick tour" in dom and "md-code__button" in dom
    for lang in ("zh", "hi"):
        assert f'hreflang="{lang}"' in dom, f"the language switcher has no {lang} entry"


def test_translated_pages_and_fallback(browser: _DevTools, server: str) -> None:
    zh = _dom(browser, f"{server}/zh/get-started/quick-tour/")
    assert "快速上手" in zh and 'lang="zh"' in zh
    hi = _dom(browser, f"{server}/hi/tutorials/distributed-training/")
    assert "डिस्ट्रिब्यूटेड ट्रेनिंग" in hi and 'lang="hi"' in hi
    fallback = _dom(browser, f"{server}/hi/how-to/hang-diagnosis/")
    assert "Diagnose a hang" in fallback  # an untranslated page shows the English text


def test_generated_cli_reference_in_the_browser(browser: _DevTools, server: str) -> None:
    dom = _dom(browser, f"{server}/reference/cli/")
    assert "--num_processes" in dom and "<table>" in dom


class _DevTools:
    """Chromium driven over ``--remote-debugging-pipe`` (the DevTools protocol on fds 3 and 4).

    ``--dump-dom`` cannot see search results: Material searches in a web worker, and the DOM is
    dumped at the load event, before the worker answers. Over the pipe a test can wait for them, and
    one browser serves every page of the module, each in its own tab.
    """

    def __init__(self, browser: str, profile: Path) -> None:
        to_child, self._to_browser = os.pipe()
        self._from_browser, from_child = os.pipe()

        def fds_3_and_4() -> None:  # runs in the child: the pipe ends at the fds Chromium expects
            read_end, write_end = os.dup(to_child), os.dup(from_child)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self._proc = subprocess.Popen(
            [browser, *_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            close_fds=False,  # fds 3 and 4 are inherited; every other pipe end is close-on-exec
            preexec_fn=fds_3_and_4,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child)
        os.close(from_child)
        self._buffer = b""
        self._last_id = 0

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        self._last_id += 1
        message: dict[str, Any] = {"id": self._last_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._last_id:
                    assert "error" not in reply, f"{method}: {reply['error']}"
                    return reply["result"]
            if select.select([self._from_browser], [], [], 0.5)[0]:
                chunk = os.read(self._from_browser, 1 << 16)
                assert chunk, f"chromium closed the DevTools pipe during {method}"
                self._buffer += chunk
        raise TimeoutError(f"chromium did not answer {method} within 60 s")

    def wait_for(self, url: str, expression: str, timeout_s: float = 30) -> Any:
        """Opens url in a new tab and returns the first non-null value of the JavaScript expression
        (None if none came); the tab is closed again."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        try:
            session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            navigated = self.call("Page.navigate", {"url": url}, session)
            assert "errorText" not in navigated, f"{url}: {navigated['errorText']}"
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                result = self.call(
                    "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session
                )
                value = result.get("result", {}).get("value")
                if value is not None:
                    return value
                time.sleep(0.05)  # a page loads in about 0.1 s: a coarser poll would dominate
            return None
        finally:
            self.call("Target.closeTarget", {"targetId": target})

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (AssertionError, OSError, TimeoutError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


# The search results' links once the worker has answered a query (null while there are none yet).
_SEARCH_RESULTS = """(() => {
  const links = Array.from(document.querySelectorAll('.md-search-result__item a'));
  return links.length ? links.map(a => a.getAttribute('href')) : null;
})()"""


@pytest.mark.parametrize(
    ("lang", "query", "expected"),
    [
        ("zh", "save_state", "reference/api/accelerator/"),  # an untranslated page's English text
        ("zh", "快速上手", "zh/get-started/quick-tour/"),  # the translated page itself
        ("hi", "save_state", "reference/api/accelerator/"),
    ],
)
def test_search_finds_results_on_the_translated_sites(
    browser: _DevTools, server: str, lang: str, query: str, expected: str
) -> None:
    # Material opens the search with the query of ?q= and runs it once its worker has the index.
    links = browser.wait_for(f"{server}/{lang}/?q={urllib.parse.quote(query)}", _SEARCH_RESULTS)
    assert links, f"searching {query!r} on the {lang} site found nothing within 30 s"
    resolved = [urllib.parse.urljoin(f"{server}/{lang}/", link) for link in links]
    assert any(f"{server}/{expected}" in link for link in resolved), resolved


def test_language_switcher_reaches_every_language(browser: _DevTools, server: str) -> None:
    titles = {"en": "Quick tour", "zh": "快速上手", "hi": "झलक"}
    for lang in titles:
        page = f"{server}/{'' if lang == 'en' else lang + '/'}get-started/quick-tour/"
        links = dict(re.findall(r'<a href="([^"]*)" hreflang="(\w+)"', _dom(browser, page)))
        targets = {code: urllib.parse.urljoin(page, href) for href, code in links.items()}
        assert set(targets) == set(titles), f"{page}: the switcher offers {sorted(targets)}"
        for code, target in targets.items():
            with urllib.request.urlopen(target, timeout=30) as reply:
                html = reply.read().decode("utf-8")
            assert f'lang="{code}"' in html and titles[code] in html, f"{page} -> {code}: {target}"
