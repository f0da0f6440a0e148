"""`accelerate.utils.fsdp_utils`: upstream's FSDP helpers, by name and signature.

FSDP is not available in this release yet (it comes as its own backend). Every name here keeps
upstream's signature, so clients such as transformers' Trainer import it, and any call raises the one
:class:`~accelerate.utils.errors.NotAvailableYetError` (made by :func:`hardware_only`) instead of
doing something else silently.
"""

from __future__ import annotations

from typing import Any

from accelerate.utils.errors import hardware_only

_FEATURE = "FSDP"
_NEEDS = "the FSDP backend, which this release does not have yet (train with DistributedDataParallel: drop the FSDP plugin/flags)"
_fsdp = hardware_only(_FEATURE, _NEEDS)


@_fsdp
def enable_fsdp_ram_efficient_loading() -> None: ...


@_fsdp
def disable_fsdp_ram_efficient_loading() -> None: ...


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
def ensure_weights_retied(param_init_fn: Any, model: Any, device: Any) -> Any: ...


@_fsdp
def fsdp2_apply_ac(accelerator: Any, model: Any) -> Any: ...


@_fsdp
def fsdp2_canonicalize_names(named_params: dict[str, Any]) -> Any: ...


@_fsdp
def fsdp2_load_full_state_dict(accelerator: Any, model: Any, full_sd: dict[str, Any], cpu_offload: bool = False) -> None: ...


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
