"""Importing accelerate.test_utils stays light; names resolve on first use."""

from __future__ import annotations

import subprocess
import sys

import accelerate.test_utils as test_utils


def test_import_is_light() -> None:
    code = (
        "import sys, accelerate, accelerate.test_utils as t\n"
        "heavy = [m for m in ('torch', 'numpy', 'unittest', 'subprocess') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_dir_lists_every_lazy_name() -> None:
    names = dir(test_utils)
    for name in ("RegressionModel", "execute_subprocess_async", "require_cuda", "test_ops", "torch_device"):
        assert name in names and name in test_utils.__all__


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        test_utils.not_a_helper  # noqa: B018
    except AttributeError as exc:
        assert "not_a_helper" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_self_check_module_still_importable() -> None:
    from accelerate.test_utils import self_check

    assert callable(self_check.main)
