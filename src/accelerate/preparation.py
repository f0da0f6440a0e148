"""The order in which ``Accelerator.prepare`` handles objects, and keeping optimizers pointed right.

Models go first (they may be moved to the device), then optimizers (whose parameter references
must follow the moved model), then dataloaders, then schedulers (which need the wrapped
optimizers). Results come back in the caller's order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from accelerate.backends.registry import Prepared, object_kind
from accelerate.utils.modeling import extract_model_from_parallel

if TYPE_CHECKING:
    from accelerate.backends.base import PrepareContext, Strategy
    from accelerate.config.dynamo import TorchDynamoPlugin
    from accelerate.precision.amp import Precision
    from accelerate.state.gradient import GradientState
    from accelerate.utils.dataclasses import DataLoaderConfiguration


_PREPARABLE: tuple[tuple[type, str], ...] = (
    (torch.nn.Module, "a model"),
    (torch.optim.Optimizer, "an optimizer"),
    (torch.utils.data.DataLoader, "a dataloader"),
)


def check_not_a_class(obj: Any, argument: str) -> None:
    """A class where an instance was meant (``nn.Linear`` for ``nn.Linear(4, 2)``) would pass through
    unchanged and fail much later; say so at ``prepare``. Other objects (None, ...) pass through.

    ``argument`` names the argument in the message, e.g. ``"prepare() argument 2"``.
    """
    if not isinstance(obj, type):
        return
    for base, what in _PREPARABLE:
        if issubclass(obj, base):
            raise TypeError(
                f"{argument} is the class {obj.__module__}.{obj.__qualname__}, not {what}: "
                f"pass an instance, e.g. `{obj.__qualname__}(...)`."
            )
    if _is_scheduler_class(obj):
        raise TypeError(
            f"{argument} is the class {obj.__module__}.{obj.__qualname__}, not a "
            f"scheduler: pass an instance, e.g. `{obj.__qualname__}(optimizer, ...)`."
        )


def _is_scheduler_class(cls: type) -> bool:
    lr_scheduler = torch.optim.lr_scheduler
    base = getattr(lr_scheduler, "LRScheduler", None) or lr_scheduler._LRScheduler
    return issubclass(cls, base | lr_scheduler.ReduceLROnPlateau)


def remap_optimizer_params(optimizer: torch.optim.Optimizer, mapping: dict[int, torch.nn.Parameter]) -> None:
    """Points ``optimizer`` at new Parameter objects (by the id of the old ones), state included."""
    if not mapping:
        return
    for group in optimizer.param_groups:
        group["params"] = [mapping.get(id(p), p) for p in group["params"]]
    for old_id, new in mapping.items():
        for key in list(optimizer.state):
            if id(key) == old_id:
                optimizer.state[new] = optimizer.state.pop(key)


def placements_for(count: int, device_placement: Sequence[bool] | None) -> list[bool | None]:
    """``prepare(device_placement=...)`` as one entry per object (None: the Accelerator's default)."""
    if device_placement is None:
        return [None] * count
    if len(device_placement) != count:
        raise ValueError(
            f"prepare(device_placement=...) needs one entry per object: got {len(device_placement)} "
            f"entries for {count} objects"
        )
    return list(device_placement)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Preparers:
    """The facade's per-kind preparation (its public ``prepare_*`` methods) and the writer of its
    registry: :func:`prepare_all` orders the calls and never sees the Accelerator. Data loaders go
    through ``PrepareContext.prepare_data_loader``, which a joint strategy calls too."""

    model: Callable[[Any, bool | None], Any]
    optimizer: Callable[[Any, bool | None], Any]
    scheduler: Callable[[Any], Any]
    # register(models=..., optimizers=..., schedulers=...): what a strategy prepared together.
    register: Callable[..., None]


def prepare_all(
    objects: list[Any],
    placements: list[bool | None],
    preparers: Preparers,
    strategy: Strategy,
    context: PrepareContext,
) -> list[Any]:
    """``Accelerator.prepare``: each object prepared by its kind, in the order the module docstring
    gives, or all together by a strategy that ``prepares_jointly``; results in the caller's order."""
    for position, obj in enumerate(objects, start=1):
        check_not_a_class(obj, f"prepare() argument {position}")
    objects = context.precision.prepare_jointly(objects)  # fp8 with MS-AMP: model and optimizer together
    results: list[Any] = list(objects)
    if strategy.prepares_jointly:  # DeepSpeed: one engine from model, optimizer, scheduler
        joint = strategy.prepare_jointly(objects, placements, context)
        preparers.register(models=joint.models, optimizers=joint.optimizers, schedulers=joint.schedulers)
        mark_prepared(context.prepared, joint.results)
        return joint.results
    kinds = [object_kind(obj) for obj in objects]
    mapping: dict[int, torch.nn.Parameter] = {}

    for i, obj in enumerate(objects):
        if kinds[i] == "model":
            before = list(obj.parameters())
            results[i] = preparers.model(obj, placements[i])
            after = list(extract_model_from_parallel(results[i]).parameters())
            # Module.to() normally keeps Parameter objects, but it may replace them (for example
            # with torch.__future__.set_overwrite_module_params_on_conversion(True)).
            mapping.update({id(old): new for old, new in zip(before, after, strict=False) if old is not new})
    for i, obj in enumerate(objects):
        if kinds[i] == "optimizer":
            remap_optimizer_params(obj, mapping)
            results[i] = preparers.optimizer(obj, placements[i])
    for i, obj in enumerate(objects):
        if kinds[i] == "dataloader":
            results[i] = context.prepare_data_loader(obj, placements[i])
    for i, obj in enumerate(objects):
        if kinds[i] == "scheduler":
            results[i] = preparers.scheduler(obj)
    mark_prepared(context.prepared, results)
    return results


def track_once(obj: Any, tracked: list[Any]) -> None:
    """Adds an already prepared ``obj`` to ``tracked`` unless it is there (by identity): listed once."""
    if not any(obj is known for known in tracked):
        tracked.append(obj)


def mark_prepared(prepared: Prepared, results: list[Any]) -> None:
    """Sets upstream's ``_is_accelerate_prepared = True`` on each result ``prepared`` now tracks.

    Libraries (transformers' Trainer) read the marker to avoid preparing a dataloader or scheduler
    twice; ``prepare_data_loader`` and ``prepare_scheduler`` hand a marked object back unchanged.
    """
    containers = (prepared.models, prepared.optimizers, prepared.schedulers, prepared.dataloaders)
    tracked = {id(obj) for container in containers for obj in container}
    for item in results:
        if id(item) in tracked:
            item._is_accelerate_prepared = True


def setup_model(
    model: torch.nn.Module,
    *,
    place: bool,
    evaluation_mode: bool,
    dispatched: bool,
    num_processes: int,
    device: torch.device,
    sharded: bool,
    strategy: Strategy,
    precision: Precision,
    dynamo_plugin: TorchDynamoPlugin,
) -> torch.nn.Module:
    """``Accelerator.prepare_model``'s work on a model it has not prepared yet: placement, fp8 layers,
    regional compilation and the strategy's wrapper. ``dispatched``: the model was spread over
    several devices by a device map (``Accelerator.verify_device_map``); ``sharded``: FSDP2 shards it."""
    if dispatched:
        # A model dispatched by a device map already sits where its hooks expect each block (some
        # maybe on disk): moving it whole would undo that, and a wrapper across processes would
        # replicate a model no process holds entirely.
        if num_processes > 1:
            raise ValueError(
                "prepare(): this model was dispatched over several devices with a device_map "
                f"({sorted(set(map(str, getattr(model, 'hf_device_map', {}).values())))}), which "
                f"cannot be trained across {num_processes} processes. Run it in one process "
                "(`accelerate launch --num_processes 1` or plain `python`), or load it without a "
                "device_map."
            )
        place = False
    from accelerate.big_modeling.quantization.checks import check_quantized_placement

    place = check_quantized_placement(model, device, place)  # bitsandbytes models stay where loaded
    # fp8: the library's layers go in before any wrapper (FSDP2 then shards the float8 linears).
    model = precision.convert_model(model, sharded=sharded)
    precision.check_model(model)
    # Regional compilation before the forward wrapper and DDP (they wrap the compiled copy), or, for
    # FSDP2 (and DeepSpeed, in its engine build), in place after setup, under the engine's hooks.
    in_place = strategy.compiles_regions_in_place and not evaluation_mode
    model = compile_before_setup(model, dynamo_plugin, in_place=in_place)
    precision.wrap_forward(model)
    if evaluation_mode:
        model = model.to(device) if place else model
    else:
        model = strategy.setup_module(model, device_placement=place)
    compiled: torch.nn.Module = compile_after_setup(model, dynamo_plugin, strategy, in_place=in_place)
    return compiled


def shard_data_loader(
    data_loader: Any,
    *,
    config: DataLoaderConfiguration,
    device: torch.device,
    data_shards: tuple[int, int],
    place: bool,
    strategy: Strategy,
    rng_types: Sequence[str],
    gradient_state: GradientState,
    slice_fn_for_dispatch: Any,
) -> Any:
    """``Accelerator.prepare_data_loader``'s work on a loader it has not prepared yet: this process's
    shard of it (``data_shards``: the number of shards and this process's, by the data-parallel
    coordinate, so one tensor-parallel group reads one batch), moved to the device if ``place``."""
    from accelerate.data.prepare import prepare_data_loader

    shards, shard = data_shards
    prepared = prepare_data_loader(
        data_loader,
        device,
        num_processes=shards,
        process_index=shard,
        split_batches=config.split_batches,
        put_on_device=place and not strategy.loader_moves_batches,
        rng_types=list(rng_types),
        dispatch_batches=config.dispatch_batches,
        even_batches=config.even_batches,
        slice_fn_for_dispatch=slice_fn_for_dispatch,
        use_seedable_sampler=config.use_seedable_sampler,
        data_seed=config.data_seed,
        non_blocking=config.non_blocking,
        use_stateful_dataloader=config.use_stateful_dataloader,
        gradient_state=gradient_state,
    )
    prepared = strategy.transform_batches(prepared)
    return strategy.wrap_dataloader(prepared) if place else prepared


def compile_before_setup(model: Any, plugin: Any, *, in_place: bool) -> Any:
    """Regional compilation as a compiled copy, before the strategy wraps the model (unless ``in_place``)."""
    if plugin.enabled and plugin.use_regional_compilation and not in_place:
        from accelerate.utils.regional_compilation import compile_regions

        return compile_regions(model, **plugin.to_kwargs())
    return model


def compile_after_setup(model: Any, plugin: Any, strategy: Any, *, in_place: bool) -> Any:
    """Whole-model ``torch.compile`` after setup, or the strategy's in-place regional compilation."""
    if not plugin.enabled:
        return model
    if not plugin.use_regional_compilation:
        return torch.compile(model, **plugin.to_kwargs())
    if in_place:
        strategy.compile_regions(model, plugin.to_kwargs())
    return model
