"""Public module path ``accelerate.utils.operations``: tree operations and collectives.

A face: every name is defined in a topic module (``tree``, ``collectives``, ``tensor_info``,
``owned_tensor``, ``fp32_outputs``, ``gathered_parameters``) and re-exported here.
"""

from accelerate.utils.collectives import (
    CannotPadNestedTensorWarning,
    DistributedOperationException,
    broadcast,
    broadcast_object_list,
    chained_operation,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
    verify_operation,
)
from accelerate.utils.fp32_outputs import ConvertOutputsToFp32, convert_outputs_to_fp32, convert_to_fp32
from accelerate.utils.gathered_parameters import GatheredParameters
from accelerate.utils.owned_tensor import copy_tensor_to_devices, gather_tensor_shape
from accelerate.utils.tensor_info import (
    TENSOR_INT_TO_DTYPE,
    TENSOR_TYPE_TO_INT,
    find_device,
    get_shape,
    initialize_tensors,
    is_tensor_information,
    is_torch_xpu_tensor,
)
from accelerate.utils.tree import (
    concatenate,
    find_batch_size,
    get_data_structure,
    honor_type,
    ignorant_find_batch_size,
    is_namedtuple,
    is_torch_tensor,
    listify,
    pad_input_tensors,
    recursively_apply,
    send_to_device,
    slice_tensors,
)

__all__ = [
    "TENSOR_INT_TO_DTYPE",
    "TENSOR_TYPE_TO_INT",
    "CannotPadNestedTensorWarning",
    "ConvertOutputsToFp32",
    "DistributedOperationException",
    "GatheredParameters",
    "broadcast",
    "broadcast_object_list",
    "chained_operation",
    "concatenate",
    "convert_outputs_to_fp32",
    "convert_to_fp32",
    "copy_tensor_to_devices",
    "find_batch_size",
    "find_device",
    "gather",
    "gather_object",
    "gather_tensor_shape",
    "get_data_structure",
    "get_shape",
    "honor_type",
    "ignorant_find_batch_size",
    "initialize_tensors",
    "is_namedtuple",
    "is_tensor_information",
    "is_torch_tensor",
    "is_torch_xpu_tensor",
    "listify",
    "pad_across_processes",
    "pad_input_tensors",
    "recursively_apply",
    "reduce",
    "send_to_device",
    "slice_tensors",
    "verify_operation",
]
