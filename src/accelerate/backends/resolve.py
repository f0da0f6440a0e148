"""The one place that maps (settings, environment) to a Strategy and a precision mode.

Every compatibility rule lives here, so an unsupported combination fails with one clear message
before any model is touched.
"""

from __future__ import annotations

from typing import Any

import torch

from accelerate.backends.base import Strategy
from accelerate.state.distributed_type import DistributedType
from accelerate.state.process import PartialState
from accelerate.utils.dataclasses import DistributedDataParallelKwargs, check_mixed_precision
from accelerate.utils.errors import NotAvailableYetError


def resolve_mixed_precision(requested: str | None, launched: str | None, device: torch.device) -> str:
    """The mixed-precision mode: the Accelerator argument wins over the launcher's setting."""
    if requested:  # None or "" leaves it to the launcher
        mode = check_mixed_precision(requested, origin=f"Accelerator(mixed_precision={str(requested)!r})")
    else:
        mode = check_mixed_precision(launched, origin="mixed_precision (from ACCELERATE_MIXED_PRECISION)")
    if mode == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"mixed_precision='bf16' needs a GPU with bf16 support; {torch.cuda.get_device_name(device)} has "
            "none. Use mixed_precision='fp16'."
        )
    if mode == "fp16" and device.type == "mps" and not hasattr(torch.amp, "GradScaler"):
        raise ValueError("mixed_precision='fp16' on MPS needs torch >= 2.4.")
    return mode


def check_unavailable(
    *,
    deepspeed_plugin: object,
    fsdp_plugin: object,
    megatron_lm_plugin: object,
    torch_tp_plugin: object = None,
    deepspeed_plugins: object = None,
    parallelism_config: object = None,
) -> None:
    if fsdp_plugin is not None and (deepspeed_plugin is not None or deepspeed_plugins is not None):
        raise ValueError(
            "Accelerator got both fsdp_plugin (FSDP) and deepspeed_plugin (DeepSpeed); they are two ways to shard "
            "the same model and cannot run together. Keep one (and drop --use_fsdp or --use_deepspeed)."
        )
    for name, value, flag in (
        ("megatron_lm_plugin", megatron_lm_plugin, "--use_megatron_lm"),
        ("torch_tp_plugin", torch_tp_plugin, "--parallelism_config_tp_size"),
    ):
        if value is not None:
            raise NotAvailableYetError(
                f"Accelerator({name}=...) is not available yet in this accelerate ({flag} likewise). "
                "Remove it to train with DistributedDataParallel, which needs no plugin."
            )
    check_available = getattr(parallelism_config, "check_available", None)
    if parallelism_config is not None and check_available is None:
        raise TypeError(
            f"Accelerator(parallelism_config=...) needs a ParallelismConfig, got {type(parallelism_config).__name__}."
        )
    if check_available is not None:
        check_available()  # plain data parallelism runs; sharding/TP/CP/SP raise NotAvailableYetError


def resolve_strategy(
    state: PartialState,
    *,
    ddp_kwargs: DistributedDataParallelKwargs | None = None,
    fsdp_plugin: Any = None,
    mixed_precision: str = "no",
    deepspeed_plugins: dict[str, Any] | None = None,
) -> Strategy:
    """The strategy for this process: FSDP2 with a plugin, DeepSpeed when it has plugins, XLA on an
    XLA device, DDP when there are several processes, else one device."""
    if fsdp_plugin is not None and state.use_distributed:
        from accelerate.backends.fsdp.strategy import FSDPStrategy

        return FSDPStrategy(
            state.device,
            fsdp_plugin,
            mixed_precision=mixed_precision,
            num_processes=state.num_processes,
            num_processes_per_node=state.num_processes_per_node,
        )
    if deepspeed_plugins:
        from accelerate.backends.deepspeed.strategy import DeepSpeedStrategy

        return DeepSpeedStrategy(state.device, deepspeed_plugins)
    if state.device.type == "xla":
        from accelerate.backends.xla.strategy import XLAStrategy
        from accelerate.config.env import read_launch_env

        # downcast_bf16 is a launch setting (--downcast_bf16, a config file's downcast_bf16).
        downcast = bool(read_launch_env().downcast_bf16)
        return XLAStrategy(
            state.device, state.num_processes, mixed_precision=mixed_precision, downcast_bf16=downcast
        )
    if state.num_processes > 1:
        from accelerate.backends.ddp import DDPStrategy

        return DDPStrategy(state.device, state.distributed_type, ddp_kwargs)
    from accelerate.backends.single_device import SingleDeviceStrategy

    # DDP kwargs are not an error in one process: the same script runs on one process and several.
    return SingleDeviceStrategy(state.device, state.distributed_type)


def resolve_fsdp_plugin(plugin: Any, deepspeed_plugin: Any) -> Any:
    """The FSDP plugin: the argument, else one read from the launcher's FSDP_* variables (--use_fsdp)."""
    from accelerate.backends.fsdp.plugin import FullyShardedDataParallelPlugin, use_fsdp_from_env

    if plugin is None and deepspeed_plugin is None and use_fsdp_from_env():
        return FullyShardedDataParallelPlugin()
    if plugin is not None and not isinstance(plugin, FullyShardedDataParallelPlugin):
        raise TypeError(
            f"Accelerator(fsdp_plugin=...) needs a FullyShardedDataParallelPlugin, got {type(plugin).__name__}."
        )
    return plugin


def plugin_choices(strategy: Strategy, *, fsdp_plugin: Any) -> dict[str, Any]:
    """What ``AcceleratorState`` records of the backend plugins chosen (users and upstream code read it)."""
    if fsdp_plugin is None:
        return {}
    # One process runs unsharded (single-device strategy): the plugin stays readable, is_fsdp2 says False.
    return {
        "fsdp_plugin": fsdp_plugin,
        "distributed_type": strategy.distributed_type,
        "is_fsdp2": strategy.distributed_type == DistributedType.FSDP,
    }
