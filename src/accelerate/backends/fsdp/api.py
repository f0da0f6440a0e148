"""Upstream's FSDP2 helper functions (``accelerate.utils.fsdp_utils`` re-exports them) over our engine."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from accelerate.backends.fsdp.plugin import FSDP_ENV, USE_FSDP_ENV
from accelerate.backends.fsdp.wrap import modules_to_shard, wrap_predicate

if TYPE_CHECKING:  # imported when called: the strategy pulls in FSDP itself
    from accelerate.backends.fsdp.strategy import FSDPStrategy


def enable_fsdp_ram_efficient_loading() -> None:
    """Asks the next FSDP Accelerator to load real weights on rank 0 only (others may stay on meta)."""
    os.environ.setdefault(USE_FSDP_ENV, "true")
    os.environ[FSDP_ENV["cpu_ram_efficient_loading"]] = "true"


def disable_fsdp_ram_efficient_loading() -> None:
    os.environ[FSDP_ENV["cpu_ram_efficient_loading"]] = "false"


def _fsdp_strategy(accelerator: Any, call: str) -> FSDPStrategy:
    from accelerate.backends.fsdp.strategy import FSDPStrategy

    strategy = getattr(accelerator, "strategy", None)
    if not isinstance(strategy, FSDPStrategy):
        raise ValueError(
            f"{call} needs an Accelerator running FSDP on several processes: create it with "
            "fsdp_plugin=FullyShardedDataParallelPlugin(...) (or launch with --use_fsdp)."
        )
    return strategy


def fsdp2_prepare_model(accelerator: Any, model: nn.Module) -> nn.Module:
    """Shards ``model`` in place with the Accelerator's plugin (blocks first, then the root)."""
    return _fsdp_strategy(accelerator, "fsdp2_prepare_model").setup_module(model, device_placement=True)


def fsdp2_prepare_auto_wrap_policy(fsdp2_plugin: Any, model: nn.Module) -> Callable[[nn.Module], bool]:
    """The predicate ``module -> shard it on its own`` of the plugin's wrap policy over ``model``."""
    return wrap_predicate(fsdp2_plugin, model)


def fsdp2_apply_ac(accelerator: Any, model: nn.Module) -> nn.Module:
    """Activation checkpointing on each block the wrap policy picks (before sharding), in place."""
    from torch.distributed._composable import checkpoint

    plugin = accelerator.state.fsdp_plugin
    for block in modules_to_shard(plugin, model):
        checkpoint(block)
    return model


def fsdp2_switch_optimizer_parameters(optimizer: torch.optim.Optimizer, mapping: Mapping[Any, Any]) -> None:
    """Replaces each optimizer parameter by ``mapping[old.data_ptr()]`` (or ``mapping[id(old)]``).

    Raises:
        ValueError: a parameter the mapping does not cover.
    """
    for group in optimizer.param_groups:
        params = []
        for param in group["params"]:
            new = mapping.get(param.data_ptr(), mapping.get(id(param)))
            if new is None:
                raise ValueError(
                    f"fsdp2_switch_optimizer_parameters: a parameter of shape {tuple(param.shape)} is not in the "
                    "mapping; build the optimizer over the parameters of the model being sharded."
                )
            params.append(new)
        group["params"] = params


def get_fsdp2_grad_scaler(**kwargs: Any) -> torch.amp.GradScaler:
    """A GradScaler for FSDP2: torch's own works on DTensor gradients (found_inf is reduced over the mesh)."""
    from accelerate.state import PartialState

    return torch.amp.GradScaler(PartialState().device.type, **kwargs)


_NAME_MODIFIERS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


def fsdp2_canonicalize_names(named_params: dict[str, Any]) -> dict[str, Any]:
    """``named_params`` with wrapper segments (checkpoint, compile, FSDP1) removed from each name."""
    out = {}
    for name, value in named_params.items():
        for modifier in _NAME_MODIFIERS:
            name = name.replace(modifier, "")
        out[name] = value
    return out


def get_parameters_from_modules(
    modules: Iterable[nn.Module] | str | None, model: nn.Module, device: Any
) -> set[nn.Parameter]:
    """The parameters of ``modules`` (module objects, or a regex over ``model``'s module names)."""
    if modules is None:
        return set()
    if isinstance(modules, str):
        pattern = re.compile(modules)
        modules = [m for name, m in model.named_modules() if pattern.fullmatch(name)]
    return {p for module in modules for p in module.parameters()}


def ensure_weights_retied(param_init_fn: Callable[..., Any] | None, model: nn.Module, device: Any) -> Any:
    """Wraps ``param_init_fn`` so that parameters the model shares (tied embeddings) stay shared after it runs."""
    from accelerate.backends.fsdp.strategy import retie, tied_parameters

    if param_init_fn is None:
        return None
    ties = tied_parameters(model)
    if not ties:
        return param_init_fn

    def init_and_retie(module: nn.Module) -> Any:
        result = param_init_fn(module)
        retie(ties)
        return result

    return init_and_retie
