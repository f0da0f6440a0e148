"""accelerate.launchers: upstream's path for the in-process launchers, and test_launch."""

from __future__ import annotations

import accelerate.launchers as launchers
from accelerate.launch import in_process
from accelerate.state import PartialState


def test_launchers_are_the_in_process_ones() -> None:
    assert launchers.notebook_launcher is in_process.notebook_launcher
    assert launchers.debug_launcher is in_process.debug_launcher
    assert set(launchers.__all__) == {"debug_launcher", "notebook_launcher", "test_launch"}


def test_test_launch_sets_up_the_state() -> None:
    assert PartialState._shared_state == {}
    launchers.test_launch()
    assert PartialState().initialized
