"""Public module path ``accelerate.utils.other``: upstream's assorted helpers, each from its topic module.

A face: compiled regions (``regional_compilation``), model structure (``module_inspection``), ports
(``ports``), formatting (``text``), the kernel check (``kernel_check``), single-file save/load
(``accelerate.checkpointing.single_file``) and nested dicts (``tree``).
"""

from __future__ import annotations

from accelerate.checkpointing.single_file import (
    TORCH_SAFE_GLOBALS,
    clean_state_dict_for_safetensors,
    load,
    np_core,
    save,
)
from accelerate.utils.kernel_check import check_os_kernel
from accelerate.utils.modeling import extract_model_from_parallel
from accelerate.utils.module_inspection import (
    get_model_tp_size,
    get_module_children_bottom_up,
    model_has_dtensor,
    recursive_getattr,
)
from accelerate.utils.ports import get_free_port, is_port_in_use
from accelerate.utils.regional_compilation import (
    compile_regions,
    compile_regions_deepspeed,
    compile_regions_fsdp2,
    has_compiled_regions,
    has_repeated_blocks,
    is_compiled_module,
    is_repeated_blocks,
)
from accelerate.utils.text import convert_bytes, get_pretty_name
from accelerate.utils.tree import merge_dicts


def wait_for_everyone() -> None:
    """Blocks until every process reaches this call (``PartialState().wait_for_everyone()``)."""
    from accelerate.state import PartialState

    PartialState().wait_for_everyone()


__all__ = [
    "TORCH_SAFE_GLOBALS",
    "check_os_kernel",
    "clean_state_dict_for_safetensors",
    "compile_regions",
    "compile_regions_deepspeed",
    "compile_regions_fsdp2",
    "convert_bytes",
    "extract_model_from_parallel",
    "get_free_port",
    "get_model_tp_size",
    "get_module_children_bottom_up",
    "get_pretty_name",
    "has_compiled_regions",
    "has_repeated_blocks",
    "is_compiled_module",
    "is_port_in_use",
    "is_repeated_blocks",
    "load",
    "merge_dicts",
    "model_has_dtensor",
    "np_core",
    "recursive_getattr",
    "save",
    "wait_for_everyone",
]
