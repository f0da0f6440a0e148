"""The public `DistributedType` enum: for users to read. Library code branches on strategies instead."""

from __future__ import annotations

import enum

from accelerate.utils.dataclasses import PrecisionType  # defined with the rest of the vocabulary

__all__ = ["ComputeEnvironment", "DistributedType", "PrecisionType"]


class DistributedType(str, enum.Enum):
    """How the current run is distributed (upstream-compatible names and ``str()``).

    Members for hardware this package cannot drive (NPU, MLU, SDAA, MUSA, HPU, Neuron) and for
    Megatron-LM exist so code that compares against them runs; nothing here ever reports them.
    """

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"
    MULTI_MPS = "MULTI_MPS"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    TP = "TP"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"
    # The quick tour still writes DistributedType.TPU; an alias keeps that working.
    TPU = "XLA"


class ComputeEnvironment(str, enum.Enum):
    LOCAL_MACHINE = "LOCAL_MACHINE"
    AMAZON_SAGEMAKER = "AMAZON_SAGEMAKER"
