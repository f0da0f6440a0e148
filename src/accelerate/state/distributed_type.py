"""The public `DistributedType` enum: for users to read. Library code branches on strategies instead."""

from __future__ import annotations

import enum

from accelerate.utils.dataclasses import PrecisionType  # defined with the rest of the vocabulary

__all__ = ["ComputeEnvironment", "DistributedType", "PrecisionType"]


class DistributedType(str, enum.Enum):
    """How the current run is distributed (upstream-compatible names)."""

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    MULTI_MPS = "MULTI_MPS"
    MULTI_XPU = "MULTI_XPU"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    XLA = "XLA"
    # The quick tour still writes DistributedType.TPU; an alias keeps that working.
    TPU = "XLA"

    def __str__(self) -> str:
        return self.value


class ComputeEnvironment(str, enum.Enum):
    LOCAL_MACHINE = "LOCAL_MACHINE"
    AMAZON_SAGEMAKER = "AMAZON_SAGEMAKER"
