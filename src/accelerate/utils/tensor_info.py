"""Describing tensors without their data: shapes, dtypes, devices, and empty tensors built from them.

Used where one process must tell others what it is about to send (their buffers are allocated from
the description), and by code that inspects a batch without touching its values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from accelerate.utils.tree import recursively_apply

# A dtype as a small integer, to travel inside an integer tensor (a shape message, say). The numbers
# are upstream's, so a message built by either library reads the same.
TENSOR_TYPE_TO_INT: dict[torch.dtype, int] = {
    torch.float32: 1,
    torch.float64: 2,
    torch.float16: 3,
    torch.bfloat16: 4,
    torch.uint8: 5,
    torch.int8: 6,
    torch.int16: 7,
    torch.int32: 8,
    torch.int64: 9,
    torch.bool: 10,
}
TENSOR_INT_TO_DTYPE: dict[int, torch.dtype] = {number: dtype for dtype, number in TENSOR_TYPE_TO_INT.items()}


@dataclasses.dataclass
class TensorInformation:
    """A tensor's shape and dtype, standing in for the tensor (see :func:`initialize_tensors`)."""

    shape: torch.Size
    dtype: torch.dtype


def is_tensor_information(tensor_info: Any) -> bool:
    return isinstance(tensor_info, TensorInformation)


def is_torch_xpu_tensor(tensor: Any) -> bool:
    """Whether ``tensor`` is a tensor on an Intel XPU device."""
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "xpu"


def get_shape(data: Any) -> Any:
    """The same nested structure with each tensor replaced by its shape as a list of ints.

    Example:
        >>> get_shape({"x": torch.zeros(2, 3), "y": [torch.zeros(4)]})
        {'x': [2, 3], 'y': [[4]]}
    """
    return recursively_apply(lambda t: list(t.shape), data)


def initialize_tensors(data_structure: Any) -> Any:
    """Empty tensors (uninitialised values) for each :class:`TensorInformation` of a nested structure."""
    return recursively_apply(
        lambda info: torch.empty(tuple(info.shape), dtype=info.dtype),
        data_structure,
        test_type=is_tensor_information,
    )


def find_device(data: Any) -> torch.device | None:
    """The device of the first tensor found in a nested structure (None when it holds no tensor).

    Objects with a ``device`` attribute of their own (a model, a ``BatchEncoding``) count as tensors.
    """
    if isinstance(data, torch.Tensor):
        return data.device
    if isinstance(data, Mapping):
        values: Any = data.values()
    elif isinstance(data, list | tuple):
        values = data
    elif dataclasses.is_dataclass(data) and not isinstance(data, type):
        values = [getattr(data, f.name) for f in dataclasses.fields(data)]
    else:
        device = getattr(data, "device", None)
        return device if isinstance(device, torch.device) else None
    for value in values:
        device = find_device(value)
        if device is not None:
            return device
    return None
