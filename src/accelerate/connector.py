"""Turns ``Accelerator(...)``'s arguments and the launcher's environment into what it runs with.

``backends/resolve.py`` decides the strategy and precision; this module wires everything else
together once: the process state, the kwargs handlers, gradient accumulation, the data and
compile settings, the project folder and the trackers. The run itself (topology, precision,
strategy, the plugins resolved once) becomes one frozen ``RunDescription`` that
``AcceleratorState`` records and reads from; nothing re-resolves it later. The Accelerator takes the result as it is,
so its constructor stays a list of assignments and each rule (which source wins, which
combination is an error) lives in one function here.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from accelerate.backends.base import Strategy
from accelerate.backends.resolve import (
    adjust_accumulation,
    backend_request,
    describe_run,
    fp8_refused_by,
    resolve_mixed_precision,
    resolve_plugins,
    resolve_strategy,
)
from accelerate.config.dynamo import TorchDynamoPlugin
from accelerate.config.env import LaunchEnv, read_launch_env
from accelerate.precision.amp import Precision
from accelerate.state import AcceleratorState, GradientState, PartialState
from accelerate.state.accelerator_state import record_run
from accelerate.state.gradient import adjusted_for_world_size
from accelerate.state.parallelism import device_mesh_for
from accelerate.utils.dataclasses import (
    AutocastKwargs,
    DataLoaderConfiguration,
    DistributedDataParallelKwargs,
    GradientAccumulationPlugin,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
    ProfileKwargs,
    ProjectConfiguration,
    collect_kwargs_handlers,
)
from accelerate.utils.kernel_check import check_os_kernel
from accelerate.utils.records import frozen_record

if TYPE_CHECKING:
    from accelerate.precision.fp8.resolve import Fp8Setup


@frozen_record  # not a dataclass: that costs ~1-2 ms to create at import (see accelerate.utils.records)
class Connection:
    """Everything an Accelerator holds besides the objects it prepares (``state.run`` describes the run)."""

    partial_state: PartialState
    state: AcceleratorState
    precision: Precision
    strategy: Strategy
    gradient_state: GradientState
    dataloader_config: DataLoaderConfiguration
    dynamo_plugin: TorchDynamoPlugin
    project_configuration: ProjectConfiguration
    log_with: list[Any]
    rng_types: list[str]
    ddp_handler: DistributedDataParallelKwargs | None
    scaler_handler: GradScalerKwargs | None
    autocast_handler: AutocastKwargs | None
    init_handler: InitProcessGroupKwargs | None
    profile_handler: ProfileKwargs | None


def connect(
    *,
    split_batches: bool | None,
    mixed_precision: str | None,
    gradient_accumulation_steps: int,
    cpu: bool,
    dataloader_config: DataLoaderConfiguration | None,
    rng_types: Sequence[str] | None,
    log_with: Any,
    project_dir: str | None,
    project_config: ProjectConfiguration | None,
    gradient_accumulation_plugin: GradientAccumulationPlugin | None,
    kwargs_handlers: Sequence[KwargsHandler] | None,
    dynamo_backend: str | None,
    dynamo_plugin: TorchDynamoPlugin | None,
    even_batches: bool | None,
    use_seedable_sampler: bool | None,
    dispatch_batches: bool | None,
    **backend_arguments: Any,
) -> Connection:
    """Validates the arguments (before any process group is created) and builds the Connection.

    ``backend_arguments`` are the Accelerator's backend arguments (the plugins, the ParallelismConfig),
    passed through by name to the backend table (``backends/table.py``), which owns each of them.
    """
    launch = read_launch_env()
    # Every row the arguments or the launcher ask for, checked (and the run's ParallelismConfig).
    request = backend_request(backend_arguments, launch)
    project = _project(project_dir, project_config)
    trackers = _trackers(log_with, project.logging_dir)
    # fp8 recipes (AORecipeKwargs, ...) configure the precision, not a torch object: resolved below.
    fp8_recipes, kwargs_handlers = _split_fp8_recipes(kwargs_handlers)
    handlers = collect_kwargs_handlers(kwargs_handlers)
    pg: InitProcessGroupKwargs | None = handlers.get(InitProcessGroupKwargs)
    partial = _partial_state(cpu, pg)
    check_os_kernel()  # as upstream's Accelerator(): a warning on Linux kernels older than 5.5.0
    earlier = _initialized_state()
    if not mixed_precision and earlier is not None:
        # As upstream: a later Accelerator() that names no precision re-uses the process's (an
        # explicit different one raises below); the launcher's is not re-read.
        mixed_precision = earlier.mixed_precision
    mode = _mixed_precision(mixed_precision, launch, partial)
    plugins = resolve_plugins(request)
    accumulation = adjust_accumulation(
        plugins,
        accumulation_plugin(
            gradient_accumulation_plugin, gradient_accumulation_steps, launch.gradient_accumulation_steps
        ),
        mode,
    )
    if earlier is not None:
        # Raises, naming both values, if an earlier Accelerator in this process chose differently.
        earlier.check_agrees(mixed_precision=mode, cpu=cpu)
    precision = Precision(
        mode,
        partial.device,
        autocast_kwargs=handlers.get(AutocastKwargs),
        scaler_kwargs=handlers.get(GradScalerKwargs),
        fp8=_fp8_setup(mode, fp8_recipes, launch, refused_by=fp8_refused_by(plugins)),
    )
    ddp_handler = handlers.get(DistributedDataParallelKwargs)
    # Validated once (sizes x world); the strategy composes on this mesh.
    mesh = device_mesh_for(request.parallelism_config, partial.num_processes, partial.device.type)
    strategy = resolve_strategy(
        partial,
        ddp_kwargs=ddp_handler,
        mixed_precision=mode,
        plugins=plugins,
        parallelism_config=request.parallelism_config,
        launch=launch,
    )
    strategy = _with_fault_tolerance(strategy, handlers, launch, partial)
    gradient_state = GradientState(adjusted_for_world_size(accumulation, partial.num_processes))
    dynamo = _dynamo_plugin(dynamo_plugin, dynamo_backend, launch)
    # The run, resolved once: AcceleratorState records it and its attributes read from it.
    run = describe_run(
        partial,
        strategy,
        mixed_precision=mode,
        plugins=plugins,
        dynamo_plugin=dynamo,
        parallelism_config=request.parallelism_config,
        device_mesh=mesh,
    )
    state = record_run(run, partial)
    return Connection(
        partial_state=partial,
        state=state,
        precision=precision,
        strategy=strategy,
        gradient_state=gradient_state,
        dataloader_config=merge_dataloader_config(
            dataloader_config,
            split_batches=split_batches,
            even_batches=even_batches,
            use_seedable_sampler=use_seedable_sampler,
            dispatch_batches=dispatch_batches,
        ),
        dynamo_plugin=dynamo,
        project_configuration=project,
        log_with=trackers,
        rng_types=list(rng_types) if rng_types is not None else ["generator"],
        ddp_handler=ddp_handler,
        scaler_handler=handlers.get(GradScalerKwargs),
        autocast_handler=handlers.get(AutocastKwargs),
        init_handler=pg,
        profile_handler=handlers.get(ProfileKwargs),
    )


def _with_fault_tolerance(
    strategy: Strategy, handlers: dict[type, Any], launch: LaunchEnv, partial: PartialState
) -> Strategy:
    """``strategy`` as one replica group when ``FaultToleranceKwargs`` or the launcher asks for it."""
    settings = launch.fault_tolerance_settings()
    if (
        "accelerate.utils.fault_tolerance" in sys.modules
    ):  # else no handler can be one: not loaded for nothing
        from accelerate.utils.fault_tolerance import FaultToleranceKwargs

        settings = handlers.get(FaultToleranceKwargs) or settings
    if settings is None:
        return strategy
    # Imported only here: a run without fault tolerance never loads the package (nor torchft).
    from accelerate.backends.fault_tolerance.strategy import fault_tolerant

    return fault_tolerant(strategy, settings, partial.num_processes, partial.process_index)


def _partial_state(cpu: bool, pg: InitProcessGroupKwargs | None) -> PartialState:
    """The process state, creating the process group as ``InitProcessGroupKwargs`` asks (if given)."""
    return PartialState(
        cpu,
        backend=pg.backend if pg else None,
        timeout=pg.timeout if pg else None,
        init_method=pg.init_method if pg else None,
    )


def _initialized_state() -> AcceleratorState | None:
    """The AcceleratorState an earlier Accelerator in this process made, if any (creates none)."""
    from accelerate.state.accelerator_state import existing_accelerator_state

    return existing_accelerator_state()


def _split_fp8_recipes(handlers: Sequence[Any] | None) -> tuple[list[Any], list[Any]]:
    """``(fp8 recipes, other kwargs handlers)``, without importing the fp8 code when there can be none.

    A recipe is an instance of a class in ``precision/fp8/recipes.py``: while that module is not
    loaded, no handler can be one (a subclass imports it too), so a run without fp8 never loads it.
    """
    if not handlers or "accelerate.precision.fp8.recipes" not in sys.modules:
        return [], list(handlers or ())
    from accelerate.precision.fp8.resolve import split_recipes

    return split_recipes(handlers)


def _fp8_setup(
    mode: str, recipes: list[Any], launch: LaunchEnv, *, refused_by: str | None
) -> Fp8Setup | None:
    """The fp8 set-up (``precision/fp8/resolve.py``), loading the fp8 code only for fp8 or a recipe.

    Without either, ``resolve_fp8`` would return None too; a recipe without fp8 is its error to raise.
    ``refused_by``: the backend that cannot train in fp8, if the run asks for one.
    """
    if mode != "fp8" and not recipes:
        return None
    from accelerate.precision.fp8.resolve import resolve_fp8

    return resolve_fp8(mode, recipes, launch, refused_by=refused_by)


def _mixed_precision(requested: str | None, launch: LaunchEnv, partial: PartialState) -> str:
    """The mode (argument, else the launcher's), checked for the device (XLA's bf16 switch: its strategy)."""
    return resolve_mixed_precision(requested, launch.mixed_precision, partial.device)


def _trackers(log_with: Any, logging_dir: str | None) -> list[Any]:
    if log_with is None or log_with == [] or log_with == "none":
        return []
    from accelerate.tracking import check_trackers

    return check_trackers(log_with, logging_dir)


def _project(project_dir: str | None, project_config: ProjectConfiguration | None) -> ProjectConfiguration:
    """The project configuration; ``project_dir`` fills in a config without one (as upstream).

    A config that names its own ``project_dir`` keeps it; otherwise ``project_dir`` becomes its
    ``project_dir`` and, where unset, its ``logging_dir`` (the config object itself is updated).
    """
    if project_config is None:
        return ProjectConfiguration(project_dir=project_dir)
    if project_dir is not None and project_config.project_dir is None:
        project_config.set_directories(project_dir)
    return project_config


def _dynamo_plugin(
    plugin: TorchDynamoPlugin | None, backend: str | None, launch: LaunchEnv
) -> TorchDynamoPlugin:
    """The ``torch.compile`` settings: what the caller set, the launcher's settings for the rest."""
    given = plugin is not None and getattr(plugin, "_backend_given", True)
    if (
        plugin is not None
        and backend is not None
        and given
        and str(plugin.backend).lower() != backend.lower()
    ):
        raise ValueError(
            f"Accelerator got dynamo_backend={backend!r} and dynamo_plugin with backend={plugin.backend!r}; "
            "set the backend in one place (the plugin is preferred)."
        )
    # The plugin fills what it was not given from the launcher when it is built (as upstream).
    plugin = dataclasses.replace(plugin) if plugin is not None else TorchDynamoPlugin(backend=backend)
    chosen = str((backend if backend is not None and not given else plugin.backend) or "no")
    # Upstream's plugin holds a DynamoBackend member whatever the case it was given in (scripts compare
    # `backend != DynamoBackend.NO`); a backend name torch knows but the enum does not stays as given.
    from accelerate.utils.enums import DynamoBackend

    plugin.backend = DynamoBackend(chosen.upper()) if chosen.upper() in DynamoBackend else chosen
    if plugin.mode is None:
        plugin.mode = launch.dynamo_mode
    if plugin.fullgraph is None:
        plugin.fullgraph = bool(launch.dynamo_use_fullgraph)
    if plugin.dynamic is None:
        plugin.dynamic = launch.dynamo_use_dynamic
    if plugin.use_regional_compilation is None:
        plugin.use_regional_compilation = launch.dynamo_use_regional_compilation
    return plugin


def accumulation_plugin(
    plugin: GradientAccumulationPlugin | None, steps: int, launched_steps: int | None
) -> GradientAccumulationPlugin:
    """The plugin, or one built from ``gradient_accumulation_steps`` (the launcher's value when unset)."""
    if plugin is not None:
        if steps != 1:
            raise ValueError(
                f"Accelerator got gradient_accumulation_steps={steps} and gradient_accumulation_plugin="
                f"{plugin}; set num_steps inside the plugin and drop gradient_accumulation_steps."
            )
        return plugin
    if steps == 1 and launched_steps is not None:
        steps = launched_steps
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"gradient_accumulation_steps must be an integer >= 1, got {steps!r}")
    return GradientAccumulationPlugin(num_steps=steps)


def merge_dataloader_config(
    config: DataLoaderConfiguration | None, **legacy: bool | None
) -> DataLoaderConfiguration:
    """Merges the older top-level data arguments into a DataLoaderConfiguration."""
    given = {k: v for k, v in legacy.items() if v is not None}
    if config is None:
        return DataLoaderConfiguration(**given)
    config = dataclasses.replace(config)  # the Accelerator's own copy: the caller's object stays as given
    defaults = DataLoaderConfiguration()
    for key, value in given.items():
        current = getattr(config, key)
        if current != getattr(defaults, key) and current != value:
            raise ValueError(
                f"Accelerator({key}={value}) contradicts dataloader_config.{key}={current}; "
                "set it in one place (DataLoaderConfiguration is preferred)."
            )
        setattr(config, key, value)
    return config
