"""Upstream's small enums (``accelerate.utils.dataclasses`` re-exports them): names scripts compare
against or pass as strings. Each member equals its string value, and ``"x" in Enum`` accepts values."""

from __future__ import annotations

import enum
from typing import Any


class EnumWithContains(enum.EnumMeta):
    """Enum metaclass whose ``in`` also accepts a member's value: ``"fp16" in PrecisionType``."""

    def __contains__(cls, item: object) -> bool:
        if isinstance(item, enum.Enum):
            return type(item) is cls
        return any(item == member.value for member in cls)  # type: ignore[var-annotated]


class BaseEnum(enum.Enum, metaclass=EnumWithContains):
    """An enum whose ``str()`` is its value and whose ``list()`` names every value."""

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def list(cls) -> list[Any]:
        return [member.value for member in cls]


class DynamoBackend(str, BaseEnum):
    """The ``torch.compile`` backends a config file or ``--dynamo_backend`` may name (upper-case values)."""

    NO = "NO"
    EAGER = "EAGER"
    AOT_EAGER = "AOT_EAGER"
    INDUCTOR = "INDUCTOR"
    AOT_TS_NVFUSER = "AOT_TS_NVFUSER"
    NVPRIMS_NVFUSER = "NVPRIMS_NVFUSER"
    CUDAGRAPHS = "CUDAGRAPHS"
    OFI = "OFI"
    FX2TRT = "FX2TRT"
    ONNXRT = "ONNXRT"
    TENSORRT = "TENSORRT"
    AOT_TORCHXLA_TRACE_ONCE = "AOT_TORCHXLA_TRACE_ONCE"
    TORCHXLA_TRACE_ONCE = "TORCHXLA_TRACE_ONCE"
    IPEX = "IPEX"
    TVM = "TVM"
    HPU_BACKEND = "HPU_BACKEND"


class LoggerType(str, BaseEnum):
    """The experiment trackers ``Accelerator(log_with=...)`` can name."""

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

    @classmethod
    def _missing_(cls, value: Any) -> LoggerType | None:
        # Names match case-insensitively: `log_with="TensorBoard"` is not a different tracker.
        if isinstance(value, str):
            for member in cls:
                if member.value == value.lower():
                    return member
        return None


class RNGType(str, BaseEnum):
    """The random-number generators a prepared dataloader can synchronise (``rng_types=[...]``)."""

    TORCH = "torch"
    CUDA = "cuda"
    MLU = "mlu"
    SDAA = "sdaa"
    MUSA = "musa"
    NPU = "npu"
    XLA = "xla"
    XPU = "xpu"
    HPU = "hpu"
    GENERATOR = "generator"


class SageMakerDistributedType(str, enum.Enum):
    """SageMaker's distribution modes (config-file vocabulary; SageMaker launching is not available)."""

    NO = "NO"
    DATA_PARALLEL = "DATA_PARALLEL"
    MODEL_PARALLEL = "MODEL_PARALLEL"


# --- the mixed-precision vocabulary, defined once ------------------------------------------------
# Every other place (the config-file schema, the CLI's choices, the launcher's checks,
# notebook_launcher, the Accelerator, Precision) derives its list from PrecisionType and validates
# through check_mixed_precision. Upstream's path is accelerate.utils.dataclasses, which re-exports
# them; they live here, torch- and dataclass-free, so that `accelerate launch` reads them without
# building every public dataclass (its start-up is on the path of every launch).
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
