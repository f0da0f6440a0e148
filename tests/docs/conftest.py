"""The documentation site, built once per session for the tests that look at it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.snippets import REPO

_HAS_MKDOCS = all(
    importlib.util.find_spec(name) is not None
    for name in ("mkdocs", "material", "mkdocstrings_handlers.python", "mkdocs_static_i18n")
)


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not _HAS_MKDOCS:
        pytest.skip('the docs extra is not installed (pip install -e ".[docs]" torch==<yours>)')
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-q",
            "-f",
            str(REPO / "mkdocs.yml"),
            "-d",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, (
        f"mkdocs build --strict failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    )
    return out
