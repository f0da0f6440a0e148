"""`accelerate.launchers`: upstream's path for the in-process launchers (home: ``accelerate.launch.in_process``)."""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_LAZY = {
    "notebook_launcher": "accelerate.launch.in_process",
    "debug_launcher": "accelerate.launch.in_process",
}
__all__ = [*sorted(_LAZY), "test_launch"]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from accelerate.launch.in_process import debug_launcher, notebook_launcher  # noqa: F401


def test_launch() -> None:
    """Checks that this process can set up its accelerate state (what a launched process does first)."""
    from accelerate.state import PartialState

    PartialState()


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
