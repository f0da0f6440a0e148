"""The package version states the upstream interface level, so clients' version gates pass."""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.version import Version

import accelerate

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = None


def test_version_is_the_upstream_interface_level() -> None:
    # transformers' Trainer requires accelerate>=1.1.0; peft/trl gate on similar floors.
    assert Version(accelerate.__version__) >= Version("1.15.0")


def test_version_matches_pyproject() -> None:
    if tomllib is None:
        return
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert declared == accelerate.__version__
