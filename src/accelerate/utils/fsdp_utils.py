"""`accelerate.utils.fsdp_utils`: upstream's FSDP helpers, by name and signature.

Nothing lives here: the engine helpers (preparing, wrapping, checkpointing blocks, the grad scaler,
rank-0 loading) come from :mod:`accelerate.backends.fsdp.api`, the checkpoint helpers (save/load of
models and optimizers, loading a full state dict into shards) from
:mod:`accelerate.backends.fsdp.checkpoint_api` and merging from :mod:`accelerate.backends.fsdp.merge`.
This module is upstream's address for them, loaded lazily.
"""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_API = "accelerate.backends.fsdp.api"
_CHECKPOINT = "accelerate.backends.fsdp.checkpoint_api"

_LAZY: dict[str, str] = {
    "disable_fsdp_ram_efficient_loading": _API,
    "enable_fsdp_ram_efficient_loading": _API,
    "ensure_weights_retied": _API,
    "fsdp2_apply_ac": _API,
    "fsdp2_canonicalize_names": _API,
    "fsdp2_prepare_auto_wrap_policy": _API,
    "fsdp2_prepare_model": _API,
    "fsdp2_switch_optimizer_parameters": _API,
    "get_fsdp2_grad_scaler": _API,
    "get_parameters_from_modules": _API,
    "fsdp2_load_full_state_dict": _CHECKPOINT,
    "load_fsdp_model": _CHECKPOINT,
    "load_fsdp_optimizer": _CHECKPOINT,
    "save_fsdp_model": _CHECKPOINT,
    "save_fsdp_optimizer": _CHECKPOINT,
    "merge_fsdp_weights": "accelerate.backends.fsdp.merge",
    "get_module_class_from_name": "accelerate.utils.parallel_configs",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
