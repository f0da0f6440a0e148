"""The public `DistributedType` enum: for users to read. Library code branches on strategies instead.

The two facts defined by the type itself live here too: which type a process's device and world size
make (:func:`process_distributed_type`), and which types upstream counts as several accelerator devices
(:func:`is_multi_device`). Every other reading of a type happens once, in ``backends/resolve.py``.
"""

from __future__ import annotations

import enum

from accelerate.utils.dataclasses import PrecisionType  # defined with the rest of the vocabulary

__all__ = [
    "ComputeEnvironment",
    "DistributedType",
    "PrecisionType",
    "is_multi_device",
    "process_distributed_type",
]


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


# Upstream's "several accelerator devices": GPUs and their kin. CPU and MPS processes are not, and
# neither are the sharding backends (a run reports FSDP or DEEPSPEED instead of its device's type).
_MULTI_DEVICE = frozenset(
    {
        DistributedType.MULTI_GPU, DistributedType.MULTI_XPU, DistributedType.MULTI_NPU, DistributedType.MULTI_MLU,
        DistributedType.MULTI_SDAA, DistributedType.MULTI_MUSA, DistributedType.MULTI_HPU,
        DistributedType.MULTI_NEURON,
    }
)  # fmt: skip
_MULTI_BY_DEVICE = {
    "cuda": DistributedType.MULTI_GPU,
    "xpu": DistributedType.MULTI_XPU,
    "mps": DistributedType.MULTI_MPS,
}


def process_distributed_type(device_type: str, world_size: int, *, xla: bool = False) -> DistributedType:
    """The type a process reports before any backend is chosen: its device kind across ``world_size``."""
    if xla:
        return DistributedType.XLA
    if world_size <= 1:
        return DistributedType.NO
    return _MULTI_BY_DEVICE.get(device_type, DistributedType.MULTI_CPU)


def is_multi_device(kind: DistributedType) -> bool:
    """Whether ``kind`` means several processes on accelerator devices (upstream's ``multi_device``)."""
    return kind in _MULTI_DEVICE
