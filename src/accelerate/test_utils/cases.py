"""``unittest.TestCase`` bases: fresh accelerate state, a shared temporary folder, managed mocks."""

from __future__ import annotations

import shutil
import tempfile
import unittest
from pathlib import Path
from typing import Any


class AccelerateTestCase(unittest.TestCase):
    """A test case that forgets accelerate's per-process state after each test.

    ``PartialState``, ``AcceleratorState`` and ``GradientState`` are shared per process; resetting
    them in ``tearDown`` lets the next test build an ``Accelerator`` with other settings.
    """

    def tearDown(self) -> None:
        super().tearDown()
        from accelerate.state import reset_state

        reset_state()


class TempDirTestCase(unittest.TestCase):
    """A test case with one temporary folder for the class, ``self.tmpdir`` (a ``Path``).

    The folder is emptied before each test when ``clear_on_setup`` is True (the default) and removed
    after the class's last test.
    """

    clear_on_setup: bool = True
    tmpdir: Path

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.tmpdir = Path(tempfile.mkdtemp(prefix="accelerate-test-"))

    @classmethod
    def tearDownClass(cls) -> None:
        super().tearDownClass()
        if cls.tmpdir.exists():
            shutil.rmtree(cls.tmpdir)

    def setUp(self) -> None:
        super().setUp()
        if self.clear_on_setup:
            for path in self.tmpdir.iterdir():
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()


class MockingTestCase(unittest.TestCase):
    """A test case that starts patches for a test and stops them when it ends, pass or fail.

    Example::

        class MyTest(MockingTestCase):
            def setUp(self):
                super().setUp()
                self.add_mocks(unittest.mock.patch.dict(os.environ, {"WORLD_SIZE": "2"}))
    """

    def add_mocks(self, mocks: Any) -> None:
        """Starts ``mocks`` (one patcher or a list of them); each is stopped at cleanup."""
        self.mocks = list(mocks) if isinstance(mocks, (list, tuple)) else [mocks]
        for mock in self.mocks:
            if not callable(getattr(mock, "start", None)) or not callable(getattr(mock, "stop", None)):
                raise TypeError(
                    f"add_mocks expects patchers with start() and stop() (e.g. unittest.mock.patch(...)), "
                    f"got {type(mock).__name__}"
                )
            mock.start()
            self.addCleanup(mock.stop)
