"""``LoggerType``: the names ``Accelerator(log_with=...)`` accepts for the built-in trackers.

Defined with upstream's other enums in ``accelerate.utils.dataclasses`` (one definition); the
trackers import it from here.
"""

from __future__ import annotations

from accelerate.utils.dataclasses import LoggerType

__all__ = ["LoggerType"]
