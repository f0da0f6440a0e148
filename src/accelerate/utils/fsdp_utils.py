"""`accelerate.utils.fsdp_utils`: upstream's FSDP helpers, by name and signature.

Nothing lives here: the engine helpers (preparing, wrapping, checkpointing blocks, the grad scaler,
rank-0 loading) come from :mod:`accelerate.backends.fsdp.api`, the checkpoint helpers (save/load of
models and optimizers, loading a full state dict into shards) from
:mod:`accelerate.backends.fsdp.checkpoint_api` and merging from :mod:`accelerate.backends.fsdp.merge`.
This module is upstream's address for them.
"""

from __future__ import annotations

from accelerate.backends.fsdp.api import (
    disable_fsdp_ram_efficient_loading,
    enable_fsdp_ram_efficient_loading,
    ensure_weights_retied,
    fsdp2_apply_ac,
    fsdp2_canonicalize_names,
    fsdp2_prepare_auto_wrap_policy,
    fsdp2_prepare_model,
    fsdp2_switch_optimizer_parameters,
    get_fsdp2_grad_scaler,
    get_parameters_from_modules,
)
from accelerate.backends.fsdp.checkpoint_api import (
    fsdp2_load_full_state_dict,
    load_fsdp_model,
    load_fsdp_optimizer,
    save_fsdp_model,
    save_fsdp_optimizer,
)
from accelerate.backends.fsdp.merge import merge_fsdp_weights
from accelerate.utils.parallel_configs import get_module_class_from_name

__all__ = [
    "disable_fsdp_ram_efficient_loading", "enable_fsdp_ram_efficient_loading", "ensure_weights_retied",
    "fsdp2_apply_ac", "fsdp2_canonicalize_names", "fsdp2_load_full_state_dict", "fsdp2_prepare_auto_wrap_policy",
    "fsdp2_prepare_model", "fsdp2_switch_optimizer_parameters", "get_fsdp2_grad_scaler",
    "get_module_class_from_name", "get_parameters_from_modules", "load_fsdp_model", "load_fsdp_optimizer",
    "merge_fsdp_weights", "save_fsdp_model", "save_fsdp_optimizer",
]  # fmt: skip
