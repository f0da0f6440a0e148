"""The device-map planner: ``infer_auto_device_map`` and its ``fallback_allocate``.

It plans upstream's maps, so a placement is reproducible across the two libraries:

* Blocks are taken in the model's order: the root's own parameters, its children, then its own
  buffers. Devices are filled in order (GPUs, ``"mps"``, ``"cpu"``, then ``"disk"``, which always
  exists as the last resort).
* The first GPU (``"mps"`` when present) and the CPU always keep room for the largest block still
  to be placed, a leaf or a ``no_split_module_classes`` block: offloaded blocks are loaded there to
  run. The other GPUs are filled to the byte. The reservation shrinks as the largest blocks go.
* A block that does not fit is split into its own tensors and children (unless it is atomic);
  otherwise the planner moves on to the next device.
* A block whose parameters are tied to blocks further on takes them along (shared bytes counted
  once); if they do not fit together, the first splittable partner is split so that only the part
  holding the tied tensor comes along.
* ``fallback_allocation`` fills a device the next block would leave empty with the first later
  block (searched breadth first) that fits.
* Buffers of blocks planned on the CPU or the disk are loaded on a GPU to run (unless
  ``offload_buffers``): a warning says when no GPU has the room left for them.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from accelerate.big_modeling.budgets import get_max_memory
from accelerate.big_modeling.device_map import clean_device_map
from accelerate.big_modeling.sizes import (
    compute_module_sizes,
    compute_module_total_buffer_size,
    get_max_layer_size,
)
from accelerate.big_modeling.tensors import DeviceLike, check_tied_parameters_in_config, find_tied_parameters

logger = logging.getLogger(__name__)
Named = tuple[str, Any]


def _inside(param: str, block: str) -> bool:
    return param == block or param.startswith(f"{block}.")


def _tied_elsewhere(block: str, ties: Sequence[Sequence[str]]) -> list[str]:
    """Parameters tied to one inside ``block`` but outside it, group by group."""
    outside: list[str] = []
    for group in ties:
        inner = [_inside(param, block) for param in group]
        if any(inner) and not all(inner):
            outside += [param for param, is_in in zip(group, inner) if not is_in]
    return outside


def _parts(module: Any, no_split: Sequence[str]) -> list[tuple[str, Any]] | None:
    """What a block splits into (own parameters, children, own buffers), or None when it is atomic."""
    if not isinstance(module, nn.Module) or type(module).__name__ in no_split:
        return None
    children = list(module.named_children())
    if not children:
        return None
    return [*module.named_parameters(recurse=False), *children, *module.named_buffers(recurse=False)]


def _split(name: str, module: Any, no_split: Sequence[str]) -> list[Named] | None:
    parts = _parts(module, no_split)
    return None if parts is None else [(f"{name}.{part}", value) for part, value in parts]


def _partners(outside: Sequence[str], todo: Sequence[Named]) -> list[int]:
    """For each outside tied parameter, the position in ``todo`` of the block that holds it (if any)."""
    found: list[int] = []
    for param in outside:
        position = next((i for i, (name, _) in enumerate(todo) if _inside(param, name)), None)
        if position is not None:
            found.append(position)
    return found


def _size_with_ties(
    size: int, outside: Sequence[str], todo: Sequence[Named], sizes: Mapping[str, int]
) -> tuple[int, list[int]]:
    """Bytes of a block with the blocks its parameters are tied to, and those blocks' positions in ``todo``.

    Each tied parameter adds its holder's size less the shared tensor (counted once, in the block).
    """
    total = size
    positions: list[int] = []
    for param in outside:
        holder = _partners([param], todo)
        if holder:
            total += sizes.get(todo[holder[0]][0], 0) - sizes.get(param, 0)
            positions.append(holder[0])
    return total, positions


def fallback_allocate(
    modules: list[tuple[str, Any]],
    module_sizes: Mapping[str, int],
    size_limit: int | str,
    no_split_module_classes: Sequence[str] | None = None,
    tied_parameters: list[list[str]] | None = None,
) -> tuple[str | None, Any, list[tuple[str, Any]]]:
    """The first block of ``modules`` (searched breadth first through splits) that fits in ``size_limit``.

    A block is measured with the blocks its parameters are tied to. Used by ``infer_auto_device_map``
    so a device is not left empty because the next block in order is too large for it.

    Returns:
        ``(name, module, remaining)``: ``remaining`` is ``modules`` with the block's ancestors replaced
        by their parts and the block removed; ``(None, None, modules)`` when nothing fits.
    """
    from accelerate.big_modeling.sizes import convert_file_size_to_int

    try:
        limit = convert_file_size_to_int(size_limit)
    except (ValueError, TypeError):
        return None, None, modules
    no_split = list(no_split_module_classes or [])
    ties = tied_parameters or []
    queue = list(modules)
    while queue:
        name, module = queue.pop(0)
        outside = _tied_elsewhere(name, ties)
        if len(_partners(outside, queue)) == len(outside):  # a partner already taken: not movable alone
            total, _ = _size_with_ties(module_sizes.get(name, 0), outside, queue, module_sizes)
            if total <= limit:
                return name, module, _take(list(modules), name)
        parts = _split(name, module, no_split) if not isinstance(module, torch.Tensor) else None
        if parts is not None:
            queue = parts + queue
    return None, None, modules


def _take(modules: list[Named], name: str) -> list[Named]:
    """``modules`` with ``name`` removed, its ancestors in the list replaced by their parts first."""
    for depth in range(1, name.count(".") + 1):
        ancestor = ".".join(name.split(".")[:depth])
        position = next((i for i, (n, _) in enumerate(modules) if n == ancestor), None)
        if position is not None:
            parts = _split(ancestor, modules[position][1], []) or []
            modules[position : position + 1] = parts
    return [entry for entry in modules if entry[0] != name]


@dataclass
class _Planner:
    """One run of the planner: budgets, what is left to place, and what each device holds."""

    budgets: dict[Any, float]
    sizes: Mapping[str, int]
    ties: list[list[str]]
    no_split: list[str]
    todo: list[Named]
    verbose: bool
    device_map: dict[str, DeviceLike] = field(default_factory=dict)
    used: dict[Any, float] = field(default_factory=dict)
    buffers: dict[Any, int] = field(default_factory=dict)
    starved: dict[Any, float] = field(default_factory=dict)  # device -> bytes its first block needed
    largest: int = 0
    largest_names: list[str] = field(default_factory=list)

    @property
    def devices(self) -> list[Any]:
        return list(self.budgets)

    def main_devices(self) -> list[Any]:
        """Devices that keep room for the largest block: they run offloaded blocks."""
        gpus = [d for d in self.budgets if d not in ("cpu", "disk")]
        if "mps" in gpus:
            return ["mps"]
        return [gpus[0], "cpu"] if gpus else ["cpu"]

    def remeasure(self) -> None:
        modules = [(n, m) for n, m in self.todo if isinstance(m, nn.Module)]
        self.largest, self.largest_names = get_max_layer_size(modules, self.sizes, self.no_split)

    def say(self, message: str) -> None:
        if self.verbose:
            print(f"infer_auto_device_map: {message}")

    def place(self, name: str, module: Any, device: Any, need: int, partners: list[int], offload_buffers: bool,
              dtype: Any, special_dtypes: Any) -> None:  # fmt: skip
        names = list(dict.fromkeys(self.todo[p][0] for p in partners))
        self.say(f"{name!r}{f' with {names}' if names else ''} ({need} bytes) -> {device!r}")
        self.used[device] = self.used.get(device, 0) + need
        self.device_map[name] = device
        for partner in names:
            self.device_map[partner] = device
        self.todo = [entry for entry in self.todo if entry[0] not in names]
        if not offload_buffers and isinstance(module, nn.Module):
            size = compute_module_total_buffer_size(module, dtype=dtype, special_dtypes=special_dtypes)
            self.buffers[device] = self.buffers.get(device, 0) + size

    def split_a_partner(self, name: str, module: Any, partners: list[int]) -> bool:
        """Splits the first splittable block tied to ``name``, so only its tied part must come along."""
        for position in partners:
            partner, partner_module = self.todo[position]
            parts = _split(partner, partner_module, self.no_split)
            if parts is None:
                continue
            self.say(f"splitting {partner!r}, tied to {name!r}, to fit them together")
            self.todo = [(name, module), *self.todo[:position], *parts, *self.todo[position + 1 :]]
            self.remeasure()
            return True
        return False


def infer_auto_device_map(
    model: nn.Module,
    max_memory: Mapping[Any, int | str] | None = None,
    no_split_module_classes: list[str] | None = None,
    dtype: str | torch.dtype | None = None,
    special_dtypes: Mapping[str, str | torch.dtype] | None = None,
    verbose: bool = False,
    clean_result: bool = True,
    offload_buffers: bool = False,
    fallback_allocation: bool = False,
) -> dict[str, DeviceLike]:
    """A device map filling the GPUs in order, then the CPU, then the disk, block by block (as upstream).

    The first GPU and the CPU keep room for the largest block not yet placed (offloaded blocks are
    loaded there to run); a block that does not fit is split into its parts unless its class is in
    ``no_split_module_classes``, else the next device is tried. Parameters tied together are placed
    with the first block holding one of them. See the module docstring for every rule.

    Args:
        model: the model (its weights may be on the meta device).
        max_memory: bytes per device, e.g. ``{0: "10GiB", "cpu": "30GiB"}``; integer keys are GPU
            indices (they need not exist here to plan). Default: what is free on each GPU and in RAM.
            The disk takes what the other devices cannot hold even when not listed; ``"disk": 0``
            refuses it (an error names the block that does not fit) and another ``"disk"`` size
            limits it (both are ours: upstream ignores a disk budget).
        no_split_module_classes: class names never split across devices (e.g. ``["LlamaDecoderLayer"]``).
        dtype: dtype the weights will be loaded in (floating weights only shrink, never grow).
        special_dtypes: per-tensor dtypes that override ``dtype``.
        verbose: print each decision.
        clean_result: merge entries of one module that share a device.
        offload_buffers: buffers of offloaded blocks are offloaded too; otherwise a warning says when
            they would not fit on any GPU next to what it holds.
        fallback_allocation: when the next block does not fit on an empty device, place there the
            first later block that fits instead of leaving it empty.

    Raises:
        ValueError: only when the disk is refused or limited: a block fits on no allowed device.

    Example:
        >>> infer_auto_device_map(model, max_memory={0: 200, 1: 200})  # linear1 64, batchnorm 72, linear2 100
        {'linear1': 0, 'batchnorm': 1, 'linear2': 1}
    """
    return _plan(
        model, max_memory, no_split_module_classes, dtype, special_dtypes, verbose, clean_result, offload_buffers,
        fallback_allocation, keep_room=True,
    )  # fmt: skip


def infer_stage_map(
    model: nn.Module, max_memory: Mapping[Any, int | str], no_split_module_classes: list[str] | None = None
) -> dict[str, DeviceLike]:
    """``infer_auto_device_map`` without room kept for offloaded blocks: for pipeline stages, which all
    run their own blocks and never load another's (entries are not merged)."""
    return _plan(
        model, max_memory, no_split_module_classes, None, None, False, False, True, False, keep_room=False
    )


def _plan(
    model: nn.Module,
    max_memory: Mapping[Any, int | str] | None,
    no_split_module_classes: list[str] | None,
    dtype: str | torch.dtype | None,
    special_dtypes: Mapping[str, str | torch.dtype] | None,
    verbose: bool,
    clean_result: bool,
    offload_buffers: bool,
    fallback_allocation: bool,
    keep_room: bool,
) -> dict[str, DeviceLike]:
    budgets: dict[Any, float] = dict(get_max_memory(max_memory))
    budgets.setdefault("disk", float("inf"))  # the last resort; a user's "disk": 0 refuses it
    if budgets["disk"] == 0:
        del budgets["disk"]
    ties = find_tied_parameters(model)
    if not ties and check_tied_parameters_in_config(model):
        logger.warning(  # upstream's words
            "The model weights are not tied. Please use the `tie_weights` method before using the "
            "`infer_auto_device` function."
        )
    todo: list[Named] = [
        *model.named_parameters(recurse=False),
        *model.named_children(),
        *model.named_buffers(recurse=False),
    ]
    plan = _Planner(
        budgets, compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes), ties,
        list(no_split_module_classes or []), todo, verbose,
    )  # fmt: skip
    plan.largest, plan.largest_names = get_max_layer_size(todo, plan.sizes, plan.no_split)
    devices, main = plan.devices, (plan.main_devices() if keep_room else [])
    slot = 0
    while plan.todo:
        name, module = plan.todo.pop(0)
        # The largest block still to come may have been this one (or inside it): measure again.
        plan.largest_names = [n for n in plan.largest_names if not _inside(n, name)]
        if not plan.largest_names:
            plan.remeasure()
        device = devices[slot]
        reserved = plan.largest if device in main else 0
        room = budgets[device] - reserved
        used = plan.used.get(device, 0)
        size = plan.sizes.get(name, 0)
        outside = _tied_elsewhere(name, ties)
        need, partners = _size_with_ties(size, outside, plan.todo, plan.sizes)
        if used + need <= room:
            plan.place(name, module, device, need, partners, offload_buffers, dtype, special_dtypes)
            continue
        if outside and used + size <= room and plan.split_a_partner(name, module, partners):
            continue
        if used + size >= room:
            parts = _split(name, module, plan.no_split)
            if parts is not None:
                plan.say(f"splitting {name!r} ({size} bytes): {room - used} bytes left on {device!r}")
                plan.todo = parts + plan.todo
                plan.remeasure()
                continue
        if used == 0 and fallback_allocation and device != "disk":
            limit = budgets[device] - max(plan.largest, need)
            found, found_module, rest = fallback_allocate(
                plan.todo, plan.sizes, int(limit), plan.no_split, ties
            )
            if found is not None:
                plan.say(f"{name!r} does not fit on the empty {device!r}; {found!r} goes there instead")
                plan.todo = [(found, found_module), (name, module), *rest]
                continue
        if used == 0:
            plan.starved[device] = need + reserved
        plan.used[device] = used + reserved
        plan.say(
            f"{name!r} ({need} bytes) does not fit on {device!r} ({room - used} bytes left); next device"
        )
        slot += 1
        if slot == len(devices):
            raise ValueError(_no_room_message(name, module, need, bool(partners), budgets, plan.no_split))
        plan.todo.insert(0, (name, module))
    device_map = clean_device_map(plan.device_map) if clean_result else plan.device_map
    if not offload_buffers:
        _warn_if_offloaded_buffers_fit_no_gpu(plan)
    if plan.starved:
        needs = "; ".join(f"{device}: {int(size)} bytes" for device, size in plan.starved.items())
        logger.info(
            "infer_auto_device_map: no block could be placed on some devices (insufficient memory); the first "
            "block each was offered needed (with the room kept for loading offloaded blocks) %s. Raise their "
            "max_memory to at least that to use them.",
            needs,
        )
    return device_map


def _warn_if_offloaded_buffers_fit_no_gpu(plan: _Planner) -> None:
    """Upstream's check: buffers of CPU/disk blocks are loaded on a GPU to run; warn if none has room."""
    offloaded = plan.buffers.get("cpu", 0) + plan.buffers.get("disk", 0)
    gpus = [device for device in plan.budgets if device not in ("cpu", "disk")]
    if offloaded == 0 or not gpus:
        return
    if any(plan.budgets[gpu] >= offloaded + plan.used.get(gpu, 0) for gpu in gpus):
        return
    warnings.warn(
        f"infer_auto_device_map: the blocks planned on the CPU or the disk have {offloaded} bytes of buffers, which "
        "are kept on the execution device to run, and no GPU has that much room left next to what it holds. If "
        "you hit an out-of-memory error, pass offload_buffers=True.",
        UserWarning,
        stacklevel=3,
    )


def _no_room_message(
    name: str, module: Any, need: float, tied: bool, budgets: Mapping[Any, float], no_split: Sequence[str]
) -> str:
    allowed = ", ".join(
        f"{device!r}: {int(size)}" for device, size in budgets.items() if size != float("inf")
    )
    fixes = "raise max_memory or allow the disk (drop \"'disk': 0\" from it and pass an offload folder)"
    if "disk" in budgets:
        fixes = "raise max_memory (the disk's too)"
    if type(module).__name__ in no_split:
        fixes += f", or remove {type(module).__name__!r} from no_split_module_classes"
    return (
        f"infer_auto_device_map: block {name!r} ({type(module).__name__}, {int(need)} bytes"
        f"{' with the modules its parameters are tied to' if tied else ''}) does not fit on any device "
        f"(max_memory {{{allowed}}}; the first GPU and the CPU keep room for the largest block, to load "
        f"offloaded blocks into). To fix it, {fixes}."
    )
