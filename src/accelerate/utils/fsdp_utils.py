"""`accelerate.utils.fsdp_utils`: upstream's FSDP helpers, by name and signature.

The checkpoint helpers (save/load_fsdp_model, save/load_fsdp_optimizer, merge_fsdp_weights,
fsdp2_load_full_state_dict) are re-exported from accelerate.checkpointing, where they live. For the
others, FSDP is not available in this release yet (it comes as its own backend). Every name here keeps
upstream's signature, so clients such as transformers' Trainer import it, and any call raises the one
:class:`~accelerate.utils.errors.NotAvailableYetError` (made by :func:`hardware_only`) instead of
doing something else silently.
"""

from __future__ import annotations

from typing import Any

from accelerate.checkpointing.fsdp_api import (  # noqa: F401 - re-exported: upstream's home of these names
    fsdp2_load_full_state_dict,
    load_fsdp_model,
    load_fsdp_optimizer,
    save_fsdp_model,
    save_fsdp_optimizer,
)
from accelerate.checkpointing.fsdp_merge import merge_fsdp_weights  # noqa: F401 - re-exported
from accelerate.utils.errors import hardware_only

_FEATURE = "FSDP"
_NEEDS = "the FSDP backend, which this release does not have yet (train with DistributedDataParallel: drop the FSDP plugin/flags)"
_fsdp = hardware_only(_FEATURE, _NEEDS)


@_fsdp
def enable_fsdp_ram_efficient_loading() -> None: ...


@_fsdp
def disable_fsdp_ram_efficient_loading() -> None: ...


@_fsdp
def ensure_weights_retied(param_init_fn: Any, model: Any, device: Any) -> Any: ...


@_fsdp
def fsdp2_apply_ac(accelerator: Any, model: Any) -> Any: ...


@_fsdp
def fsdp2_canonicalize_names(named_params: dict[str, Any]) -> Any: ...


@_fsdp
def fsdp2_prepare_auto_wrap_policy(fsdp2_plugin: Any, model: Any) -> Any: ...


@_fsdp
def fsdp2_prepare_model(accelerator: Any, model: Any) -> Any: ...


@_fsdp
def fsdp2_switch_optimizer_parameters(optimizer: Any, mapping: dict[Any, Any]) -> None: ...


@_fsdp
def get_fsdp2_grad_scaler(**kwargs: Any) -> Any: ...


@_fsdp
def get_parameters_from_modules(modules: Any, model: Any, device: Any) -> Any: ...
