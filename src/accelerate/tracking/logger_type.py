"""``LoggerType``: the names ``Accelerator(log_with=...)`` accepts for the built-in trackers.

Upstream keeps it in ``accelerate.utils.dataclasses``; it lives here, beside the trackers it names,
and the upstream paths re-export it.
"""

from __future__ import annotations

import enum
from typing import Any


class _ContainsValues(enum.EnumMeta):
    # `"wandb" in LoggerType` answers for plain strings too (Python 3.11's Enum raises TypeError).
    def __contains__(cls, item: object) -> bool:
        try:
            cls(item)
        except ValueError:
            return False
        return True


class LoggerType(str, enum.Enum, metaclass=_ContainsValues):
    """A built-in experiment tracker. Each member equals (and prints as) its string name.

    Example:
        >>> Accelerator(log_with=[LoggerType.TENSORBOARD, "wandb"])  # doctest: +SKIP
    """

    ALL = "all"
    AIM = "aim"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    COMETML = "comet_ml"
    MLFLOW = "mlflow"
    CLEARML = "clearml"
    DVCLIVE = "dvclive"
    SWANLAB = "swanlab"
    TRACKIO = "trackio"

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def list(cls) -> list[str]:
        """Every member's string name."""
        return [str(member) for member in cls]

    @classmethod
    def _missing_(cls, value: Any) -> LoggerType | None:
        # Names are matched case-insensitively: `log_with="TensorBoard"` is not a different tracker.
        if isinstance(value, str):
            for member in cls:
                if member.value == value.lower():
                    return member
        return None
