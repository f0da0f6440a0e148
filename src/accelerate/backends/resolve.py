"""The one place that maps (settings, environment) to a Strategy and a precision mode.

Every compatibility rule lives here, so an unsupported combination fails with one clear message
before any model is touched.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import torch

from accelerate.backends.base import Strategy
from accelerate.state.distributed_type import DistributedType
from accelerate.state.process import PartialState
from accelerate.state.run import RunDescription, check_unavailable, describe_process
from accelerate.utils.dataclasses import DistributedDataParallelKwargs, check_mixed_precision

# ``accelerate.backends.fsdp.plugin.USE_FSDP_ENV``, spelled here so that a run the launcher did not
# start with --use_fsdp never imports the FSDP package (a test keeps the two equal).
_USE_FSDP_ENV = "ACCELERATE_USE_FSDP"

__all__ = [
    "check_unavailable",  # the plugin rules live beside the description (state/run.py): one copy
    "describe_run",
    "resolve_fsdp_plugin",
    "resolve_mixed_precision",
    "resolve_strategy",
]


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


def resolve_strategy(
    state: PartialState,
    *,
    ddp_kwargs: DistributedDataParallelKwargs | None = None,
    fsdp_plugin: Any = None,
    mixed_precision: str = "no",
    deepspeed_plugins: dict[str, Any] | None = None,
    parallelism_config: Any = None,
) -> Strategy:
    """The strategy for this process: the N-D composition (tensor parallel, FSDP2/HSDP) when a
    parallelism config shards or splits tensors, FSDP2 with a plugin, DeepSpeed when it has plugins,
    XLA on an XLA device, DDP when there are several processes, else one device.

    ``parallelism_config`` must have its mesh built (``device_mesh_for``) when it is used here.
    """
    if (
        parallelism_config is not None
        and parallelism_config.device_mesh is not None
        and not deepspeed_plugins
        and (parallelism_config.tp_enabled or parallelism_config.dp_shard_cp_dim_names)
    ):
        from accelerate.backends.parallel.strategy import ParallelStrategy

        # fsdp_plugin (if any) carries the FSDP settings (mixed precision, resharding, AC); the
        # mesh comes from the config.
        return ParallelStrategy(
            state.device,
            parallelism_config,
            fsdp_plugin,
            mixed_precision=mixed_precision,
            num_processes=state.num_processes,
            num_processes_per_node=state.num_processes_per_node,
            process_type=state.distributed_type,
        )
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


def resolve_fsdp_plugin(plugin: Any, deepspeed_plugin: Any, environ: Mapping[str, str] | None = None) -> Any:
    """The FSDP plugin this run uses: the argument, else one the launcher asked for (``--use_fsdp``),
    with the launcher's ``FSDP_*`` variables filling the fields the caller left unset.

    The result is a copy; the caller's plugin stays as they built it.
    """
    env = os.environ if environ is None else environ
    if plugin is None and (deepspeed_plugin is not None or _USE_FSDP_ENV not in env):
        return None  # nothing asks for FSDP: the FSDP package stays unloaded
    from accelerate.backends.fsdp.launch import plugin_with_launch_env
    from accelerate.backends.fsdp.plugin import FullyShardedDataParallelPlugin, use_fsdp_from_env

    if plugin is None and not use_fsdp_from_env(env):
        return None
    if plugin is not None and not isinstance(plugin, FullyShardedDataParallelPlugin):
        raise TypeError(
            f"Accelerator(fsdp_plugin=...) needs a FullyShardedDataParallelPlugin, got {type(plugin).__name__}."
        )
    return plugin_with_launch_env(plugin if plugin is not None else FullyShardedDataParallelPlugin(), environ)


def describe_run(
    partial: PartialState,
    strategy: Strategy,
    *,
    mixed_precision: str,
    deepspeed_plugins: dict[str, Any] | None,
    fsdp_plugin: Any,
    dynamo_plugin: Any,
    parallelism_config: Any,
    device_mesh: Any,
) -> RunDescription:
    """The Accelerator's run: the process's description plus what the chosen strategy decided.

    One process with an FSDP plugin runs unsharded (single-device strategy): the plugin stays
    readable and ``is_fsdp2`` is False. When FSDP shards, ``fsdp_plugin`` is the strategy's own
    copy, so edits through ``AcceleratorState().fsdp_plugin`` reach the engine (as upstream).
    """
    sharded = strategy.distributed_type == DistributedType.FSDP
    replica, shard = strategy.data_parallel_ranks(partial.process_index)
    process = describe_process(
        partial,
        mixed_precision=mixed_precision,
        deepspeed_plugins=deepspeed_plugins,
        fsdp_plugin=getattr(strategy, "plugin", fsdp_plugin) if sharded else fsdp_plugin,
        dynamo_plugin=dynamo_plugin,
        parallelism_config=parallelism_config,
        distributed_type=strategy.distributed_type,
    )
    coordinates: dict[str, Any] = {}
    if parallelism_config is not None and device_mesh is not None:
        # The true coordinates on the N-D mesh (validated in device_mesh_for): the data shard a
        # process reads is its data-parallel coordinate, shared by its tensor/context-parallel group.
        coords = parallelism_config.coordinates(partial.process_index)
        coordinates = {
            "tensor_parallel_rank": coords["tp"],
            "context_parallel_rank": coords["cp"],
            "data_parallel_size": parallelism_config.data_parallel_size,
            "data_parallel_index": parallelism_config.data_parallel_index(partial.process_index),
        }
    return dataclasses.replace(
        process,
        strategy=strategy.name,
        composes_parallelism=strategy.composes_parallelism,
        is_fsdp2=sharded,
        device_mesh=device_mesh,
        data_parallel_rank=replica,
        data_parallel_shard_rank=shard,
        **coordinates,
    )
