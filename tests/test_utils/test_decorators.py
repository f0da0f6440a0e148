"""The decorators skip or run for real: applied to unittest cases run by a runner and to plain functions."""

from __future__ import annotations

import os
import subprocess
import sys
import unittest
from pathlib import Path

import pytest
import torch

import accelerate
from accelerate.test_utils import decorators as deco
from accelerate.test_utils import probes


def _outcome(decorator: object) -> tuple[str, str]:
    """Runs a one-test unittest case decorated with ``decorator``: ("ran" | "skipped", skip reason)."""
    calls: list[bool] = []

    class Case(unittest.TestCase):
        @decorator  # type: ignore[misc]
        def test_it(self) -> None:
            calls.append(True)

    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Case).run(result)
    assert not result.errors and not result.failures, result.errors + result.failures
    if result.skipped:
        assert not calls
        return "skipped", result.skipped[0][1]
    assert calls == [True]
    return "ran", ""


def test_skip_always_skips() -> None:
    assert _outcome(deco.skip)[0] == "skipped"


def test_plain_function_raises_skiptest_that_pytest_understands() -> None:
    @deco.skip
    def fn() -> None:
        raise AssertionError("must not run")

    with pytest.raises(unittest.SkipTest):
        fn()


def test_skip_on_a_whole_class() -> None:
    @deco.skip
    class Case(unittest.TestCase):
        def test_a(self) -> None:
            raise AssertionError("must not run")

    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(Case).run(result)
    assert len(result.skipped) == 1 and not result.failures


@pytest.mark.parametrize(
    ("value", "expected"), [(None, "skipped"), ("yes", "ran"), ("1", "ran"), ("no", "skipped")]
)
def test_slow_follows_run_slow(monkeypatch: pytest.MonkeyPatch, value: str | None, expected: str) -> None:
    if value is None:
        monkeypatch.delenv("RUN_SLOW", raising=False)
    else:
        monkeypatch.setenv("RUN_SLOW", value)
    state, reason = _outcome(deco.slow)
    assert state == expected
    if state == "skipped":
        assert "RUN_SLOW" in reason


def test_parse_flag_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACC_TEST_FLAG", raising=False)
    assert deco.parse_flag_from_env("ACC_TEST_FLAG") is False
    assert deco.parse_flag_from_env("ACC_TEST_FLAG", default=True) is True
    monkeypatch.setenv("ACC_TEST_FLAG", "True")
    assert deco.parse_flag_from_env("ACC_TEST_FLAG") is True
    monkeypatch.setenv("ACC_TEST_FLAG", "maybe")
    with pytest.raises(ValueError, match="ACC_TEST_FLAG='maybe'"):
        deco.parse_flag_from_env("ACC_TEST_FLAG")


def test_run_first_keeps_the_test_runnable() -> None:
    assert _outcome(deco.run_first)[0] == "ran"


def test_require_torch_min_version() -> None:
    assert _outcome(deco.require_torch_min_version(version="2.0"))[0] == "ran"
    state, reason = _outcome(deco.require_torch_min_version(version="99.0"))
    assert state == "skipped" and "torch >= 99.0" in reason and torch.__version__ in reason
    with pytest.raises(TypeError, match="needs a version"):
        deco.require_torch_min_version(lambda: None)


def test_device_decorators_answer_from_the_machine() -> None:
    has_cuda = torch.cuda.is_available()
    gpus = torch.cuda.device_count() if has_cuda else 0
    assert _outcome(deco.require_cuda)[0] == ("ran" if has_cuda else "skipped")
    assert _outcome(deco.require_multi_gpu)[0] == ("ran" if gpus > 1 else "skipped")
    assert _outcome(deco.require_single_gpu)[0] == ("ran" if gpus == 1 else "skipped")
    on_cpu = probes.accelerator_device() == "cpu"
    assert _outcome(deco.require_cpu)[0] == ("ran" if on_cpu else "skipped")
    assert _outcome(deco.require_non_cpu)[0] == ("skipped" if on_cpu else "ran")
    assert _outcome(deco.require_fp16)[0] == "ran"  # fp16 mixed precision works on the CPU too
    mps = torch.backends.mps.is_available()
    assert _outcome(deco.require_mps)[0] == ("ran" if mps else "skipped")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the reasons given on a CPU-only machine")
def test_missing_hardware_skips_with_a_reason() -> None:
    state, reason = _outcome(deco.require_cuda)
    assert state == "skipped" and "CUDA GPU" in reason
    state, reason = _outcome(deco.require_npu)
    assert state == "skipped" and "Ascend NPU" in reason and "torch_npu" in reason
    state, reason = _outcome(deco.require_multi_device)
    assert state == "skipped" and "two or more" in reason


def test_features_this_accelerate_lacks_skip_even_with_the_package() -> None:
    for decorator, module in [
        (deco.require_deepspeed, "accelerate.backends.deepspeed"),
        (deco.require_tpu, "accelerate.backends.xla"),
        (deco.require_fp8, "accelerate.precision.fp8"),
        (deco.require_pippy, "accelerate.inference"),
    ]:
        if probes.implements(module):
            continue  # implemented since: the package probe decides, tested elsewhere
        state, reason = _outcome(decorator)
        assert state == "skipped" and "does not implement" in reason and module in reason


def test_package_decorators() -> None:
    assert _outcome(deco.require_transformers)[0] == (
        "ran" if probes.has_package("transformers") else "skipped"
    )
    if not probes.has_package("datasets"):
        state, reason = _outcome(deco.require_huggingface_suite)
        assert state == "skipped" and "install datasets" in reason
    assert probes.has_package("definitely_not_a_package_xyz") is False


def test_tracker_decorators() -> None:
    # tensorboard is in the test extra, and this accelerate has its tracker.
    assert _outcome(deco.require_tensorboard)[0] == "ran"
    assert _outcome(deco.require_trackers)[0] == "ran"
    if not probes.implements("accelerate.tracking.aim"):
        state, reason = _outcome(deco.require_aim)
        assert state == "skipped" and "aim tracker" in reason


PYTEST_FILE = """
import unittest

from accelerate.test_utils import require_cuda, require_torch_min_version, skip, slow
from accelerate.test_utils.testing import require_datasets, require_transformers


@skip
class TestPlainClass:
    def test_a(self):
        raise AssertionError("must not run")


@skip
class TestUnittestClass(unittest.TestCase):
    def test_b(self):
        raise AssertionError("must not run")


@slow
def test_slow():
    pass


@require_torch_min_version(version="2.0")
def test_new_enough_torch():
    pass


@require_transformers
def test_with_transformers():
    pass


@require_datasets
def test_with_datasets():
    pass


@require_cuda
def test_on_cuda():
    pass
"""


def test_under_a_real_pytest_run(tmp_path: Path) -> None:
    (tmp_path / "test_decorated.py").write_text(PYTEST_FILE)
    env = {k: v for k, v in os.environ.items() if k != "RUN_SLOW"}
    env["PYTHONPATH"] = str(Path(accelerate.__file__).resolve().parents[1])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "test_decorated.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    skipped = 4  # the two classes' tests, slow, datasets (absent here)
    ran = 2  # torch >= 2.0, transformers (in the test extra)
    if torch.cuda.is_available():
        ran += 1
    else:
        skipped += 1
    if probes.has_package("datasets"):
        ran, skipped = ran + 1, skipped - 1
    if not probes.has_package("transformers"):
        ran, skipped = ran - 1, skipped + 1
    assert f"{ran} passed, {skipped} skipped" in proc.stdout, proc.stdout
    assert "RUN_SLOW" in proc.stdout and "marked to be skipped" in proc.stdout
