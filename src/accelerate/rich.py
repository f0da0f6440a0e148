"""Importing ``accelerate.rich`` makes `rich` render uncaught exceptions (locals hidden).

``import accelerate`` does this by itself only when ``ACCELERATE_ENABLE_RICH=1`` and rich is
installed (see :func:`accelerate.utils.imports.is_rich_available`).
"""

from __future__ import annotations

from accelerate.utils.imports import is_package_available

if not is_package_available("rich"):
    raise ModuleNotFoundError(
        "accelerate.rich needs the `rich` package for its tracebacks. Install it with: pip install rich"
    )

from rich.traceback import install  # noqa: E402  (after the check, so a missing rich gets the message above)

install(show_locals=False)
