"""`accelerate.utils.modeling`: unwrapping parallel/compile wrappers, plus upstream's path for the
big-model helpers (sizes, device maps, tensor placement, loading), which live in ``big_modeling/``
and load on first use.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch.nn.parallel import DataParallel, DistributedDataParallel

from accelerate._lazy import lazy_exports

WEIGHTS_INDEX_NAME = "pytorch_model.bin.index.json"

_BIG = "accelerate.big_modeling."
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        ["dtype_byte_size", "convert_file_size_to_int", "compute_module_sizes", "compute_module_total_buffer_size",
         "calculate_maximum_sizes", "get_max_layer_size", "get_module_leaves", "get_module_size_with_ties",
         "CustomDtype"],
        _BIG + "sizes",
    ),
    **dict.fromkeys(["get_max_memory", "get_balanced_memory"], _BIG + "budgets"),
    **dict.fromkeys(
        ["check_device_map", "check_device_same", "clean_device_map"], _BIG + "device_map"
    ),
    **dict.fromkeys(["infer_auto_device_map", "fallback_allocate"], _BIG + "planner"),
    **dict.fromkeys(
        ["set_module_tensor_to_device", "named_module_tensors", "get_non_persistent_buffers", "id_tensor_storage",
         "find_tied_parameters", "retie_parameters", "check_tied_parameters_in_config",
         "check_tied_parameters_on_same_device", "has_offloaded_params", "align_module_device"],
        _BIG + "tensors",
    ),
    **dict.fromkeys(
        ["load_state_dict", "load_checkpoint_in_model", "load_offloaded_weights", "get_state_dict_from_offload",
         "get_state_dict_offloaded_model"],
        _BIG + "loading",
    ),
    **dict.fromkeys(["get_grad_scaler", "get_mixed_precision_context_manager"], "accelerate.precision.helpers"),
}  # fmt: skip

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


def is_peft_model(model: object) -> bool:
    """True when ``model`` is a PEFT model (a ``peft.PeftModel`` or subclass); peft is not imported."""
    return any(
        cls.__name__ == "PeftModel" and cls.__module__.split(".")[0] == "peft" for cls in type(model).__mro__
    )


# Upstream's attribute name: code that wraps a forward by hand saves the original under it too.
ORIGINAL_FORWARD = "_original_forward"


def remove_forward_wrapper(model: torch.nn.Module) -> None:
    """Restores the forward that mixed precision wrapped (see ``Precision.wrap_forward``).

    When the saved forward is the class's own, the instance attribute is dropped rather than set to
    the bound method, so the model is exactly as before (and pickles as before).
    """
    original = model.__dict__.pop(ORIGINAL_FORWARD, None)
    if original is None:
        return
    own = getattr(type(model), "forward", None)
    if getattr(original, "__self__", None) is model and getattr(original, "__func__", None) is own:
        model.__dict__.pop("forward", None)
    else:
        model.forward = original


def _is_compiled(model: torch.nn.Module) -> bool:
    return hasattr(model, "_orig_mod") and type(model).__name__ == "OptimizedModule"


def _is_regional_copy(model: torch.nn.Module) -> bool:
    # compile_regions keeps the original in __dict__ (not as a submodule: its parameters are the copy's).
    return "_orig_mod" in model.__dict__


def _is_deepspeed_engine(model: Any) -> bool:
    # Only a loaded deepspeed can have made an engine; never import it here.
    engine = getattr(sys.modules.get("deepspeed.runtime.engine"), "DeepSpeedEngine", None)
    return engine is not None and isinstance(model, engine)


def extract_model_from_parallel(
    model: torch.nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
) -> torch.nn.Module:
    """Strips DDP/DataParallel and ``torch.compile`` wrappers (in any nesting) from ``model``.

    With ``keep_torch_compile=True`` a compiled model stays compiled around the unwrapped module.
    With ``keep_fp32_wrapper=False`` the mixed-precision forward wrapper is removed too.
    """
    compiled: torch.nn.Module | None = None
    inner = model
    while True:
        if _is_regional_copy(inner):
            compiled = inner
            inner = inner.__dict__["_orig_mod"]
        elif _is_compiled(inner):
            compiled = inner
            inner = inner._orig_mod  # type: ignore[assignment]
        elif isinstance(inner, DistributedDataParallel | DataParallel):
            inner = inner.module
        elif _is_deepspeed_engine(inner):
            inner = inner.module  # type: ignore[assignment]  # a DeepSpeedEngine's module is a Module
        elif getattr(type(inner), "wraps_user_module", False):  # e.g. a pipeline's PipelinedModel
            inner = inner.module  # type: ignore[assignment]
        else:
            break
    if not keep_fp32_wrapper:
        remove_forward_wrapper(inner)
        if compiled is not None and _is_regional_copy(compiled):
            remove_forward_wrapper(compiled)  # the Accelerator wraps a regional copy's own forward
    if keep_torch_compile and compiled is not None:
        if _is_regional_copy(compiled):
            compiled.__dict__["_orig_mod"] = inner
        else:
            compiled._orig_mod = inner
        return compiled
    return inner
