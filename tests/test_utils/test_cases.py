"""The TestCase bases, run through unittest's own runner."""

from __future__ import annotations

import os
import unittest
from pathlib import Path
from unittest import mock

from accelerate.test_utils.testing import AccelerateTestCase, MockingTestCase, TempDirTestCase


def _run(case: type[unittest.TestCase]) -> unittest.TestResult:
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(case).run(result)
    assert not result.errors and not result.failures, result.errors + result.failures
    return result


def test_accelerate_test_case_resets_state_between_tests() -> None:
    class Case(AccelerateTestCase):
        # Without a reset, the second Accelerator conflicts with the first one's mixed precision.
        def test_1_bf16(self) -> None:
            from accelerate import Accelerator

            self.assertEqual(Accelerator(cpu=True, mixed_precision="bf16").mixed_precision, "bf16")

        def test_2_fp32(self) -> None:
            from accelerate import Accelerator

            self.assertEqual(Accelerator(cpu=True).mixed_precision, "no")

    assert _run(Case).testsRun == 2


def test_temp_dir_test_case() -> None:
    seen: dict[str, object] = {}

    class Case(TempDirTestCase):
        def test_1_write(self) -> None:
            self.assertTrue(self.tmpdir.is_dir())
            (self.tmpdir / "file.txt").write_text("x")
            (self.tmpdir / "sub").mkdir()
            seen["dir"] = self.tmpdir

        def test_2_cleared(self) -> None:
            seen["left"] = sorted(p.name for p in self.tmpdir.iterdir())

    _run(Case)
    assert seen["left"] == []
    assert isinstance(seen["dir"], Path) and not seen["dir"].exists()  # removed after the class


def test_temp_dir_test_case_can_keep_files() -> None:
    seen: list[list[str]] = []

    class Case(TempDirTestCase):
        clear_on_setup = False

        def test_1(self) -> None:
            (self.tmpdir / "kept").write_text("x")

        def test_2(self) -> None:
            seen.append([p.name for p in self.tmpdir.iterdir()])

    _run(Case)
    assert seen == [["kept"]]


def test_mocking_test_case_starts_and_stops_patches() -> None:
    seen: list[str | None] = []

    class Case(MockingTestCase):
        def setUp(self) -> None:
            super().setUp()
            self.add_mocks([mock.patch.dict(os.environ, {"ACC_MOCK_PROBE": "on"})])

        def test_it(self) -> None:
            seen.append(os.environ.get("ACC_MOCK_PROBE"))

    _run(Case)
    assert seen == ["on"] and "ACC_MOCK_PROBE" not in os.environ


def test_mocking_test_case_rejects_non_patchers() -> None:
    class Case(MockingTestCase):
        def test_it(self) -> None:
            with self.assertRaisesRegex(TypeError, "start\\(\\) and stop\\(\\)"):
                self.add_mocks(object())

    _run(Case)
