"""The mixed-precision vocabulary, defined once: :class:`PrecisionType` and :func:`check_mixed_precision`.

Every other place (the config-file schema, the CLI's choices, the launcher's checks,
notebook_launcher, the Accelerator, Precision) derives its list from PrecisionType and validates
through check_mixed_precision. Upstream's path is ``accelerate.utils.dataclasses``, which re-exports
these; they live in this small torch-free module so that ``accelerate launch`` reads them without
building every public dataclass (its start-up is on the critical path of every launch).
"""

from __future__ import annotations

import enum


class PrecisionType(str, enum.Enum):
    """The mixed-precision modes a config file, a flag or ``Accelerator(mixed_precision=...)`` may name."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"

    def __str__(self) -> str:
        return self.value


# Every spelling the config-file schema and `accelerate launch --mixed_precision` accept.
MIXED_PRECISION_MODES: tuple[str, ...] = tuple(mode.value for mode in PrecisionType)
# The modes this release can run (what `accelerate config` offers): all of them. fp8 runs through
# torchao on any device, Transformer Engine / MS-AMP on fp8 GPUs (accelerate.precision.fp8).
AVAILABLE_MIXED_PRECISION_MODES: tuple[str, ...] = MIXED_PRECISION_MODES


def check_mixed_precision(value: object, *, origin: str = "mixed_precision") -> str:
    """Returns ``value`` as one of :data:`AVAILABLE_MIXED_PRECISION_MODES` (lower-cased), or raises.

    Args:
        value: a mode name or :class:`PrecisionType` member; ``None`` means ``"no"``.
        origin: how the messages name where the value came from, e.g.
            ``"mixed_precision=fp8 (from flag --mixed_precision)"`` or ``"Accelerator(mixed_precision=...)"``.

    Raises:
        ValueError: a name that is not a mode.
    """
    mode = "no" if value is None else str(value.value if isinstance(value, PrecisionType) else value).lower()
    if mode not in AVAILABLE_MIXED_PRECISION_MODES:
        raise ValueError(
            f"{origin}: {value!r} is not a mixed-precision mode; use one of "
            f"{', '.join(repr(m) for m in AVAILABLE_MIXED_PRECISION_MODES)}."
        )
    return mode
