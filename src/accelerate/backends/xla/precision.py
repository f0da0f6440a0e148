"""torch_xla's bf16 switches: how ``mixed_precision="bf16"`` (and ``downcast_bf16``) reach an XLA device.

On XLA, upstream's bf16 is not autocast: torch_xla stores float32 tensors as bfloat16 itself when
``XLA_USE_BF16=1`` is set, or downcasts float32 to bfloat16 and float64 to float32 with
``XLA_DOWNCAST_BF16=1`` (``downcast_bf16: true``). torch_xla reads the variables when it creates
tensors, so they must be set before any model reaches the device: by the launcher in the child's
environment (:func:`bf16_env`), and, for scripts started without it, by the strategy when the
Accelerator is built (:func:`apply_bf16_env`). No torch import: the launcher uses this module.
"""

from __future__ import annotations

import os


def bf16_env(mixed_precision: str | None, downcast_bf16: bool) -> dict[str, str]:
    """The torch_xla variable that ``mixed_precision`` asks for: none unless it is ``"bf16"``.

    Example:
        >>> bf16_env("bf16", downcast_bf16=False)
        {'XLA_USE_BF16': '1'}
    """
    if mixed_precision != "bf16":
        return {}
    return {"XLA_DOWNCAST_BF16" if downcast_bf16 else "XLA_USE_BF16": "1"}


def apply_bf16_env(mixed_precision: str | None, downcast_bf16: bool) -> None:
    """Sets :func:`bf16_env`'s variable in this process; a value the user (or the launcher) already set is kept."""
    for name, value in bf16_env(mixed_precision, downcast_bf16).items():
        os.environ.setdefault(name, value)


__all__ = ["apply_bf16_env", "bf16_env"]
