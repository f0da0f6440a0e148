"""Public module path ``accelerate.utils.operations``: tree operations and collectives.

A lazy face: each name loads from its home on first use. Collectives live in
:mod:`accelerate.collectives` (``operations``, ``owned_tensor``); tree operations, tensor
descriptions, the fp32 output wrapper and ``GatheredParameters`` are utils' own topic modules.
"""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_COLLECTIVES = "accelerate.collectives.operations"
_TREE = "accelerate.utils.tree"
_TENSOR_INFO = "accelerate.utils.tensor_info"
_FP32 = "accelerate.utils.fp32_outputs"
_OWNED = "accelerate.collectives.owned_tensor"

_LAZY: dict[str, str] = {
    **dict.fromkeys(
        [
            "CannotPadNestedTensorWarning", "DistributedOperationException", "broadcast", "broadcast_object_list",
            "chained_operation", "gather", "gather_object", "pad_across_processes", "reduce", "verify_operation",
        ],
        _COLLECTIVES,
    ),
    **dict.fromkeys(["ConvertOutputsToFp32", "convert_outputs_to_fp32", "convert_to_fp32"], _FP32),
    "GatheredParameters": "accelerate.utils.gathered_parameters",
    **dict.fromkeys(["copy_tensor_to_devices", "gather_tensor_shape"], _OWNED),
    **dict.fromkeys(
        [
            "TENSOR_INT_TO_DTYPE", "TENSOR_TYPE_TO_INT", "find_device", "get_shape", "initialize_tensors",
            "is_tensor_information", "is_torch_xpu_tensor",
        ],
        _TENSOR_INFO,
    ),
    **dict.fromkeys(
        [
            "concatenate", "find_batch_size", "get_data_structure", "honor_type", "ignorant_find_batch_size",
            "is_namedtuple", "is_torch_tensor", "listify", "pad_input_tensors", "recursively_apply",
            "send_to_device", "slice_tensors",
        ],
        _TREE,
    ),
}  # fmt: skip

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
