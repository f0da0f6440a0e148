"""Public module path ``accelerate.utils.other``: upstream's assorted helpers, each from its topic module.

A lazy face: compiled regions (``regional_compilation``), model structure (``module_inspection``),
ports (``ports``), formatting (``text``), the kernel check (``kernel_check``), nested dicts
(``tree``), single-file save/load (:mod:`accelerate.checkpointing.single_file`) and
``wait_for_everyone`` (:mod:`accelerate.state`); each loads on first use.
"""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_U = "accelerate.utils."
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        ["TORCH_SAFE_GLOBALS", "clean_state_dict_for_safetensors", "load", "np_core", "save"],
        "accelerate.checkpointing.single_file",
    ),
    "check_os_kernel": _U + "kernel_check",
    "extract_model_from_parallel": _U + "modeling",
    **dict.fromkeys(
        ["get_model_tp_size", "get_module_children_bottom_up", "model_has_dtensor", "recursive_getattr"],
        _U + "module_inspection",
    ),
    **dict.fromkeys(["get_free_port", "is_port_in_use"], _U + "ports"),
    **dict.fromkeys(
        ["compile_regions", "compile_regions_deepspeed", "compile_regions_fsdp2", "has_compiled_regions",
         "has_repeated_blocks", "is_compiled_module", "is_repeated_blocks"],
        _U + "regional_compilation",
    ),
    **dict.fromkeys(["convert_bytes", "get_pretty_name"], _U + "text"),
    "merge_dicts": _U + "tree",
    "wait_for_everyone": "accelerate.state",
}  # fmt: skip

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
