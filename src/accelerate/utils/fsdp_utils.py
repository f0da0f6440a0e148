"""`accelerate.utils.fsdp_utils`: upstream's FSDP helpers, by name and signature.

The engine helpers (preparing, wrapping, checkpointing blocks, the grad scaler, rank-0 loading) come
from :mod:`accelerate.backends.fsdp_api`. The checkpoint helpers not written yet keep upstream's
signature and raise the one :class:`~accelerate.utils.errors.NotAvailableYetError` (made by
:func:`hardware_only`) instead of doing something else silently.
"""

from __future__ import annotations

from typing import Any

from accelerate.backends.fsdp_api import (
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
from accelerate.utils.errors import hardware_only
from accelerate.utils.parallel_configs import get_module_class_from_name

__all__ = [
    "disable_fsdp_ram_efficient_loading", "enable_fsdp_ram_efficient_loading", "ensure_weights_retied",
    "fsdp2_apply_ac", "fsdp2_canonicalize_names", "fsdp2_load_full_state_dict", "fsdp2_prepare_auto_wrap_policy",
    "fsdp2_prepare_model", "fsdp2_switch_optimizer_parameters", "get_fsdp2_grad_scaler",
    "get_module_class_from_name", "get_parameters_from_modules", "load_fsdp_model", "load_fsdp_optimizer",
    "merge_fsdp_weights", "save_fsdp_model", "save_fsdp_optimizer",
]  # fmt: skip

_FEATURE = "FSDP"
_NEEDS = "FSDP checkpoint support, which this release does not have yet (use Accelerator.get_state_dict for a full state dict)"
_fsdp = hardware_only(_FEATURE, _NEEDS)




@_fsdp
def save_fsdp_model(
    fsdp_plugin: Any, accelerator: Any, model: Any, output_dir: str, model_index: int = 0,
    adapter_only: bool = False, use_dcp: bool = True,
) -> None: ...  # fmt: skip


@_fsdp
def load_fsdp_model(
    fsdp_plugin: Any, accelerator: Any, model: Any, input_dir: str, model_index: int = 0,
    adapter_only: bool = False, use_dcp: bool = True,
) -> None: ...  # fmt: skip


@_fsdp
def save_fsdp_optimizer(
    fsdp_plugin: Any, accelerator: Any, optimizer: Any, model: Any, output_dir: str, optimizer_index: int = 0,
    use_dcp: bool = True,
) -> None: ...  # fmt: skip


@_fsdp
def load_fsdp_optimizer(
    fsdp_plugin: Any, accelerator: Any, optimizer: Any, model: Any, input_dir: str, optimizer_index: int = 0,
    adapter_only: bool = False, use_dcp: bool = True,
) -> None: ...  # fmt: skip


@_fsdp
def merge_fsdp_weights(
    checkpoint_dir: str, output_path: str, safe_serialization: bool = True, remove_checkpoint_dir: bool = False
) -> None: ...





@_fsdp
def fsdp2_load_full_state_dict(accelerator: Any, model: Any, full_sd: dict[str, Any], cpu_offload: bool = False) -> None: ...





