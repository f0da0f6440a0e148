"""The one place that maps (settings, environment) to a Strategy and a precision mode: a loop over the
backend table (``backends/table.py``).

Every compatibility rule lives in a row's spec (``BackendSpec.check``) or in a row's declared
conflicts, checked here before any process group exists, so an unsupported combination fails with
one clear message before any model is touched. Nothing here names a backend: a new one is a row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from accelerate.backends.base import Strategy
from accelerate.backends.spec import BackendRequest, BuildContext
from accelerate.backends.table import BACKEND_ARGUMENTS, TABLE, Row, row
from accelerate.config.env import LaunchEnv
from accelerate.state.distributed_type import DistributedType
from accelerate.state.parallelism_env import resolve_parallelism_config
from accelerate.state.process import PartialState
from accelerate.state.run import RunDescription, describe_process
from accelerate.utils.dataclasses import DistributedDataParallelKwargs, check_mixed_precision

if TYPE_CHECKING:
    from accelerate.utils.dataclasses import GradientAccumulationPlugin

__all__ = [
    "adjust_accumulation",
    "backend_request",
    "describe_run",
    "fp8_refused_by",
    "resolve_mixed_precision",
    "resolve_plugins",
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


def backend_request(arguments: Mapping[str, Any], launch: LaunchEnv) -> BackendRequest:
    """The run's request of the backends, checked: every row it asks for, and their conflicts.

    ``arguments`` are the Accelerator's backend arguments by name (``BACKEND_ARGUMENTS``); the
    ParallelismConfig is resolved here once (the script's, else ``torch_tp_plugin``'s, else the
    launcher's). Raises before any process group exists.
    """
    unknown = sorted(set(arguments) - set(BACKEND_ARGUMENTS))
    if unknown:
        raise TypeError(
            f"connect() got {unknown}, which no backend row owns; the rows own {list(BACKEND_ARGUMENTS)}."
        )
    given = {name: value for name, value in arguments.items() if value is not None}
    config = resolve_parallelism_config(given.get("parallelism_config"), given.get("torch_tp_plugin"), launch)
    request = BackendRequest(arguments=given, launch=launch, parallelism_config=config)
    for asked in asked_rows(request):
        asked.spec().check(request)
    return request


def asked_rows(request: BackendRequest) -> list[Row]:
    """The rows the request asks for, in table order, after their conflicts (see ``Row.conflicts``)."""
    asked = [candidate for candidate in TABLE if candidate.asked(request)]
    kept = []
    for candidate in asked:
        steps_aside = False
        for other, why in _conflicts(candidate, asked):
            mine, theirs = candidate.given(request), other.given(request)
            if mine and theirs:
                first, second = sorted((candidate, other), key=lambda r: -len(r.conflicts))
                raise ValueError(
                    f"Accelerator got both {first.given(request)[0]} ({first.spec().label}) and "
                    f"{second.given(request)[0]} ({second.spec().label}); {why}. Keep one (and drop "
                    f"--use_{first.name} or --use_{second.name})."
                )
            # The code's argument wins over the launcher's setting; two launcher settings: the earlier row.
            earlier = TABLE.index(other) < TABLE.index(candidate)
            steps_aside = steps_aside or bool(theirs) or (not mine and earlier)
        if not steps_aside:
            kept.append(candidate)
    return kept


def _conflicts(candidate: Row, asked: list[Row]) -> list[tuple[Row, str]]:
    """The asked rows that cannot run with ``candidate``, whichever of the two declares the conflict."""
    found = []
    for other in asked:
        declared = dict(candidate.conflicts).get(other.name) or dict(other.conflicts).get(candidate.name)
        if other is not candidate and declared:
            found.append((other, declared))
    return found


def resolve_plugins(request: BackendRequest) -> dict[str, Any]:
    """Each asked row's plugin, by row name (from the arguments, the launch settings for the rest)."""
    return {asked.name: asked.spec().plugin(request) for asked in asked_rows(request)}


def adjust_accumulation(
    plugins: Mapping[str, Any], accumulation: GradientAccumulationPlugin, mixed_precision: str
) -> GradientAccumulationPlugin:
    """The run's gradient accumulation after each asked backend's adjustment (a config's own value)."""
    for name, plugin in plugins.items():
        accumulation = row(name).spec().adjust_accumulation(plugin, accumulation, mixed_precision)
    return accumulation


def fp8_refused_by(plugins: Mapping[str, Any]) -> str | None:
    """The label of an asked backend that cannot train in fp8 (None when every one can)."""
    for name, plugin in plugins.items():
        spec = row(name).spec()
        if plugin and not spec.runs_fp8:
            return spec.label
    return None


def resolve_strategy(
    state: PartialState,
    *,
    ddp_kwargs: DistributedDataParallelKwargs | None = None,
    mixed_precision: str = "no",
    plugins: Mapping[str, Any] | None = None,
    parallelism_config: Any = None,
    launch: LaunchEnv | None = None,
) -> Strategy:
    """The strategy for this process: the first row of the table whose spec runs.

    Rows asked by an argument or a launch setting (``plugins``) and the device rows that fit the
    process (an XLA device, several processes, the single-device fallback) are asked in table
    order; a row neither asked nor fitting is never imported. ``parallelism_config`` must have its
    mesh built (``device_mesh_for``) when it is used here.
    """
    plugins = dict(plugins or {})
    context = BuildContext(
        partial=state,
        mixed_precision=mixed_precision,
        plugins=plugins,
        parallelism_config=parallelism_config,
        ddp_kwargs=ddp_kwargs,
        launch=launch if launch is not None else LaunchEnv(),
    )
    for candidate in TABLE:
        considered = candidate.name in plugins or (candidate.is_device_row and candidate.fits(state))
        if considered and candidate.spec().runs(context):
            return candidate.spec().strategy(context)
    raise RuntimeError("the backend table's last row (single_device) always runs; the table lost it")


def describe_run(
    partial: PartialState,
    strategy: Strategy,
    *,
    mixed_precision: str,
    plugins: Mapping[str, Any],
    dynamo_plugin: Any,
    parallelism_config: Any,
    device_mesh: Any,
) -> RunDescription:
    """The Accelerator's run: the process's description plus what the chosen strategy decided.

    Each asked row fills the fields of its plugin (``BackendSpec.describe``); one process with an
    FSDP plugin runs unsharded (single-device strategy): the plugin stays readable and ``is_fsdp2``
    is False.
    """
    sharded = strategy.distributed_type == DistributedType.FSDP
    replica, shard = strategy.data_parallel_ranks(partial.process_index)
    fields: dict[str, Any] = {}
    for name, plugin in plugins.items():
        fields.update(row(name).spec().describe(plugin, strategy, sharded=sharded))
    process = describe_process(
        partial,
        mixed_precision=mixed_precision,
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
        device_mesh=device_mesh,
        data_parallel_rank=replica,
        data_parallel_shard_rank=shard,
        **fields,
        **coordinates,
    )
