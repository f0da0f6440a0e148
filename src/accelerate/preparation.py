"""The order in which ``Accelerator.prepare`` handles objects, and keeping optimizers pointed right.

Models go first (they may be moved to the device), then optimizers (whose parameter references
must follow the moved model), then dataloaders, then schedulers (which need the wrapped
optimizers). Results come back in the caller's order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from accelerate.backends.registry import object_kind

if TYPE_CHECKING:
    from accelerate.accelerator import Accelerator


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


def prepare_all(accelerator: Accelerator, objects: list[Any], placements: list[bool | None]) -> list[Any]:
    for position, obj in enumerate(objects, start=1):
        check_not_a_class(obj, f"prepare() argument {position}")
    objects = accelerator.precision.prepare_jointly(objects)  # fp8 with MS-AMP: model and optimizer together
    results: list[Any] = list(objects)
    if accelerator.strategy.prepares_jointly:  # DeepSpeed: one engine from model, optimizer, scheduler
        joint = accelerator.strategy.prepare_jointly(accelerator, objects, placements, accelerator._prepared)
        accelerator._register_prepared(
            models=joint.models, optimizers=joint.optimizers, schedulers=joint.schedulers
        )
        mark_prepared(accelerator, joint.results)
        return joint.results
    kinds = [object_kind(obj) for obj in objects]
    mapping: dict[int, torch.nn.Parameter] = {}

    for i, obj in enumerate(objects):
        if kinds[i] == "model":
            before = list(obj.parameters())
            results[i] = accelerator.prepare_model(obj, device_placement=placements[i])
            after = list(accelerator.unwrap_model(results[i]).parameters())
            # Module.to() normally keeps Parameter objects, but it may replace them (for example
            # with torch.__future__.set_overwrite_module_params_on_conversion(True)).
            mapping.update({id(old): new for old, new in zip(before, after, strict=False) if old is not new})
    for i, obj in enumerate(objects):
        if kinds[i] == "optimizer":
            remap_optimizer_params(obj, mapping)
            results[i] = accelerator.prepare_optimizer(obj, device_placement=placements[i])
    for i, obj in enumerate(objects):
        if kinds[i] == "dataloader":
            results[i] = accelerator.prepare_data_loader(obj, device_placement=placements[i])
    for i, obj in enumerate(objects):
        if kinds[i] == "scheduler":
            results[i] = accelerator.prepare_scheduler(obj)
    mark_prepared(accelerator, results)
    return results


def track_once(obj: Any, tracked: list[Any]) -> None:
    """Adds an already prepared ``obj`` to ``tracked`` unless it is there (by identity): listed once."""
    if not any(obj is known for known in tracked):
        tracked.append(obj)


def mark_prepared(accelerator: Accelerator, results: list[Any]) -> None:
    """Sets upstream's ``_is_accelerate_prepared = True`` on each result the accelerator now tracks.

    Libraries (transformers' Trainer) read the marker to avoid preparing a dataloader or scheduler
    twice; ``prepare_data_loader`` and ``prepare_scheduler`` hand a marked object back unchanged.
    """
    tracked = {
        id(obj)
        for container in (
            accelerator._models,
            accelerator._optimizers,
            accelerator._schedulers,
            accelerator._dataloaders,
        )
        for obj in container
    }
    for item in results:
        if id(item) in tracked:
            item._is_accelerate_prepared = True


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
