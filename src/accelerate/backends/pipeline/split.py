"""Where a model is cut into pipeline stages: a balanced device map, and checked split points.

A pipeline gives each process one stage, so ``n`` processes need ``n - 1`` split points: the names
of the modules each later stage begins with. ``"auto"`` plans them with big_modeling's device-map
planner: every process is treated as a device with an equal share of the model's bytes (plus room
for its largest unsplittable block), and the first module placed on device ``i`` starts stage ``i``.
Names a user passes are checked against the model before anything is traced, so a typo is reported
with the modules that do exist instead of as an error deep inside torch's tracer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from torch import nn

from accelerate.big_modeling.planner import infer_auto_device_map, infer_stage_map
from accelerate.big_modeling.sizes import compute_module_sizes, get_max_layer_size


class _DropMissingGpuWarning(logging.Filter):
    """Hides the planner's "this machine has no GPU ``i``" warning: stages are not GPUs here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("max_memory names GPU")


@contextmanager
def _stages_are_not_gpus() -> Iterator[None]:
    # The budgets are keyed 0..n-1 because that is how a device map names devices; on a CPU-only
    # machine (gloo processes) the planner would otherwise warn once per stage about missing GPUs.
    budget_logger = logging.getLogger("accelerate.big_modeling.budgets")
    quiet = _DropMissingGpuWarning()
    budget_logger.addFilter(quiet)
    try:
        yield
    finally:
        budget_logger.removeFilter(quiet)


def generate_device_map(
    model: nn.Module,
    num_processes: int = 1,
    no_split_module_classes: list[str] | None = None,
    max_memory: Mapping[Any, int | str] | None = None,
) -> dict[str, Any]:
    """A device map that spreads ``model`` evenly over ``num_processes`` pipeline stages.

    Each stage is a "device" ``0 .. num_processes - 1`` of the map. Without ``max_memory`` every stage
    gets the same budget, the smallest with which big_modeling's planner fits the whole model, block
    by block in the model's order, on the stages: the most even split that keeps blocks whole.
    Entries are not merged (``clean_result=False``), so the first entry of each device is the first
    module of that stage.

    Args:
        model: the model to plan for (its weights may be on the meta device).
        num_processes: how many stages; 1 gives the plain device map of this machine.
        no_split_module_classes: class names whose instances stay in one stage (e.g. ``["GPT2Block"]``).
        max_memory: bytes per stage, e.g. ``{0: "1GiB", 1: "1GiB"}``, instead of the even shares.

    Example:
        >>> generate_device_map(model, num_processes=2, no_split_module_classes=["Block"])
        {'embed': 0, 'blocks.0': 0, 'blocks.1': 1, 'head': 1}
    """
    if num_processes < 1:
        raise ValueError(f"generate_device_map(num_processes={num_processes}) needs at least one process")
    no_split = list(no_split_module_classes or [])
    if num_processes == 1:
        return infer_auto_device_map(model, no_split_module_classes=no_split, clean_result=False)
    with _stages_are_not_gpus():
        if max_memory is not None:  # the plain planner, as upstream: stage 0 keeps room for offloaded blocks
            return infer_auto_device_map(
                model, max_memory=max_memory, no_split_module_classes=no_split, clean_result=False
            )
        device_map = infer_stage_map(model, _balanced_budgets(model, num_processes, no_split), no_split)
    return _spread(model, device_map, num_processes)


def _spread(model: nn.Module, device_map: dict[str, Any], num_processes: int) -> dict[str, Any]:
    """``device_map`` with its stages cut further until every one of ``num_processes`` has a block.

    Filling stages in order to the smallest budget that fits can leave the last stages empty (six
    equal blocks on four stages fill three stages with two each). Cutting the largest stage in two,
    where its halves are most even, never raises the largest stage, so the balance is kept.
    """
    sizes = compute_module_sizes(model)
    modules = {name for name, _ in model.named_modules() if name}
    groups: list[list[str]] = []
    for name, device in device_map.items():
        if groups and device_map[groups[-1][0]] == device:
            groups[-1].append(name)
        else:
            groups.append([name])
    while len(groups) < num_processes:
        # Candidate cuts: before any module entry but the first of its stage (a stage begins at a module).
        cuts = [
            (max(sum(sizes.get(n, 0) for n in g[:i]), sum(sizes.get(n, 0) for n in g[i:])), index, i)
            for index, g in enumerate(groups)
            for i in range(1, len(g))
            if g[i] in modules
        ]
        if not cuts:
            break  # too few blocks: auto_split_points names the stage that stays empty
        largest = max(sum(sizes.get(n, 0) for n in groups[index]) for _, index, _ in cuts)
        _, index, i = min(c for c in cuts if sum(sizes.get(n, 0) for n in groups[c[1]]) == largest)
        groups[index : index + 1] = [groups[index][:i], groups[index][i:]]
    return {name: stage for stage, group in enumerate(groups) for name in group}


def _stage_budgets(budget: int, num_processes: int) -> dict[Any, int]:
    budgets: dict[Any, int] = {stage: budget for stage in range(num_processes)}
    # No offloading: every block must land on a stage (and no room is held back for loading
    # offloaded blocks, which would shrink the first stage).
    budgets["disk"] = 0
    return budgets


def _fits(model: nn.Module, budget: int, num_processes: int, no_split: list[str]) -> bool:
    """Whether the planner places all of ``model`` on ``num_processes`` stages of ``budget`` bytes each."""
    try:
        with _stages_are_not_gpus():
            infer_stage_map(model, _stage_budgets(budget, num_processes), no_split)
    except ValueError:
        return False
    return True


def _balanced_budgets(model: nn.Module, num_processes: int, no_split: list[str]) -> dict[Any, int]:
    """Equal per-stage budgets, the smallest for which the whole model fits (to about 1%).

    The planner fills stages in order, so the smallest budget that still fits everything is the
    most even split of the blocks in their order (the linear-partition problem, solved by bisection).
    """
    sizes = compute_module_sizes(model)
    top: list[tuple[str, Any]] = [
        *model.named_parameters(recurse=False),
        *model.named_buffers(recurse=False),
        *model.named_children(),
    ]
    total = max(sizes[""], 1)
    low = max(math.ceil(total / num_processes), get_max_layer_size(top, sizes, no_split)[0]) - 1
    high = total
    step = max(total // (100 * num_processes), 1)
    if _fits(model, low + 1, num_processes, no_split):
        high = low + 1
    while high - low > step:  # invariant: `high` fits, `low` does not
        middle = (low + high) // 2
        if _fits(model, middle, num_processes, no_split):
            high = middle
        else:
            low = middle
    return _stage_budgets(high, num_processes)


def auto_split_points(
    model: nn.Module, num_processes: int, no_split_module_classes: list[str] | None = None
) -> list[str]:
    """The ``num_processes - 1`` module names that begin stages 1, 2, ... of a balanced split.

    Raises:
        ValueError: the model has too few blocks to give every process a stage.
    """
    device_map = generate_device_map(model, num_processes, no_split_module_classes)
    modules = {name for name, _ in model.named_modules() if name}
    points: list[str] = []
    for stage in range(1, num_processes):
        # Root-level parameters can have entries of their own: a stage must begin at a module.
        first = next(
            (name for name, device in device_map.items() if device == stage and name in modules), None
        )
        if first is None:
            planned = sorted({str(device) for device in device_map.values()})
            raise ValueError(
                f"split_points='auto' found no module to begin stage {stage} of {num_processes}: the balanced "
                f"plan uses only stages {planned} (the model has too few blocks, or "
                f"no_split_module_classes={no_split_module_classes!r} keeps too much together). Pass "
                f"split_points=[...] with {num_processes - 1} module name(s), e.g. from "
                f"{_top_level(model)}, or run on fewer processes."
            )
        points.append(first)
    return points


def _top_level(model: nn.Module) -> list[str]:
    return [name for name, _ in model.named_children()]


def check_split_points(model: nn.Module, split_points: Any, num_processes: int) -> list[str]:
    """``split_points`` as a list, after checking they name modules and give one stage per process.

    Raises:
        TypeError: ``split_points`` is neither ``"auto"`` nor a list of strings.
        ValueError: a name is not a module of ``model``, a name repeats, or the count is not
            ``num_processes - 1``.
    """
    if isinstance(split_points, str) or not isinstance(split_points, Sequence):
        raise TypeError(
            f"split_points must be 'auto' or a list of module names (e.g. ['layers.4']), got {split_points!r}"
        )
    points = list(split_points)
    not_strings = [p for p in points if not isinstance(p, str)]
    if not_strings:
        raise TypeError(f"split_points must be module names (strings); these are not: {not_strings!r}")
    modules = {name for name, _ in model.named_modules() if name}
    unknown = [p for p in points if p not in modules]
    if unknown:
        raise ValueError(
            f"split_points {unknown} are not modules of {type(model).__name__}; its top-level modules are "
            f"{_top_level(model)} (name nested ones with dots, e.g. 'layers.2')."
        )
    repeated = sorted({p for p in points if points.count(p) > 1})
    if repeated:
        raise ValueError(
            f"split_points names {repeated} more than once; each stage begins at a different module"
        )
    if len(points) != num_processes - 1:
        relation = "more" if len(points) > num_processes - 1 else "fewer"
        raise ValueError(
            f"{len(points)} split points give {len(points) + 1} stages, {relation} than the {num_processes} "
            f"processes of this run: a pipeline puts one stage on each process, so pass exactly "
            f"{num_processes - 1} split point(s) (or split_points='auto'), or launch {len(points) + 1} processes."
        )
    return points


def resolve_split_points(
    model: nn.Module, split_points: Any, num_processes: int, no_split_module_classes: list[str] | None
) -> list[str]:
    """The checked split points: planned for ``"auto"``, otherwise the user's, checked."""
    if isinstance(split_points, str) and split_points == "auto":
        return auto_split_points(model, num_processes, no_split_module_classes)
    if isinstance(split_points, str):
        raise ValueError(
            f"split_points must be 'auto' or a list of module names, got the string {split_points!r}"
        )
    return check_split_points(model, split_points, num_processes)
