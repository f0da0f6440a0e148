"""Version gates compare installed packages' real versions."""

from __future__ import annotations

import importlib.metadata

import numpy
import pytest
import torch
from packaging.version import Version, parse

from accelerate.utils import versions
from accelerate.utils.versions import compare_versions, is_torch_version


@pytest.mark.parametrize("package", ["torch", "numpy", "packaging", "safetensors"])
def test_compare_versions_on_installed_packages(package: str) -> None:
    installed = parse(importlib.metadata.version(package))
    assert compare_versions(package, "==", str(installed))
    assert compare_versions(package, ">=", str(installed)) and compare_versions(package, "<=", str(installed))
    assert not compare_versions(package, "!=", str(installed))
    bumped = f"{installed.major + 1}.0"
    assert compare_versions(package, "<", bumped) and not compare_versions(package, ">", bumped)


def test_compare_versions_matches_the_modules_own_version() -> None:
    assert compare_versions("numpy", "==", numpy.__version__)
    assert compare_versions("torch", "==", torch.__version__)


def test_compare_versions_accepts_versions_directly() -> None:
    assert compare_versions("2.4.1", ">", "2.4.0")
    assert compare_versions(Version("1.0"), "<", "1.0.1")
    assert not compare_versions("2.4.0rc1", ">=", "2.4.0")


def test_compare_versions_errors_name_the_problem() -> None:
    with pytest.raises(ValueError, match="=>"):
        compare_versions("torch", "=>", "2.0")
    with pytest.raises(
        importlib.metadata.PackageNotFoundError, match="^compare_versions: 'no-such-package'.*pip"
    ):
        compare_versions("no-such-package", ">=", "1.0")


def test_is_torch_version_and_torch_version() -> None:
    current = parse(torch.__version__)
    assert versions.torch_version == current
    assert is_torch_version("==", torch.__version__)
    assert is_torch_version(">=", "2.0") and not is_torch_version("<", "2.0")
    assert is_torch_version("<", f"{current.major}.{current.minor + 1}")
