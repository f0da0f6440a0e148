"""``LoggerType``: the names ``Accelerator(log_with=...)`` accepts for the built-in trackers.

Defined with upstream's other small enums in ``accelerate.utils.enums`` (one definition, which
``accelerate.utils.dataclasses`` re-exports at upstream's path); the trackers import it from here.
"""

from __future__ import annotations

from accelerate.utils.enums import LoggerType

__all__ = ["LoggerType"]
