"""Device maps: which device holds each block of a model, inferred from memory budgets or checked.

A device map maps module (or tensor) names to a GPU index, ``"cpu"``, ``"disk"`` or another torch
device; the longest matching name decides where a tensor goes. ``""`` is the whole model.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from accelerate.big_modeling.budgets import get_max_memory
from accelerate.big_modeling.sizes import compute_module_sizes, get_max_layer_size
from accelerate.big_modeling.tensors import DeviceLike, find_tied_parameters

OFFLOAD_DEVICES = ("cpu", "disk")


def device_of(name: str, device_map: Mapping[str, DeviceLike]) -> DeviceLike | None:
    """The device ``device_map`` gives ``name`` (its longest matching entry), or None."""
    best: str | None = None
    for key in device_map:
        if (key == "" or name == key or name.startswith(f"{key}.")) and (best is None or len(key) > len(best)):
            best = key
    return None if best is None else device_map[best]


def check_device_same(first_device: torch.device, second_device: torch.device) -> bool:
    """Whether two devices are the same, ``cuda`` (current index) counting as ``cuda:0``."""
    if first_device.type != second_device.type:
        return False
    if first_device.type == "cuda" and (first_device.index is None or second_device.index is None):
        # An index-less CUDA device means the current one, which is 0 unless set otherwise.
        first_device = torch.device("cuda", first_device.index or 0)
        second_device = torch.device("cuda", second_device.index or 0)
    return first_device == second_device


def clean_device_map(device_map: dict[str, DeviceLike], module_name: str = "") -> dict[str, DeviceLike]:
    """Merges entries under one module that all name the same device into one entry (in place).

    Example:
        >>> clean_device_map({"a.0": "cpu", "a.1": "cpu", "b": 0})
        {'b': 0, 'a': 'cpu'}
    """
    prefix = f"{module_name}." if module_name else ""
    below = [key for key in device_map if key.startswith(prefix)]
    values = {str(device_map[key]) for key in below}
    if len(below) > 1 and len(values) == 1:
        device = device_map[below[0]]
        for key in below:
            del device_map[key]
        device_map[module_name] = device
        return device_map
    depth = module_name.count(".") + 2 if module_name else 1
    children = {".".join(key.split(".")[:depth]) for key in below if len(key) > len(module_name)}
    for child in sorted(children):
        clean_device_map(device_map, child)
    return device_map


def _device_here(device: Any) -> bool:
    """Whether ``device`` (a device map value) exists on this machine."""
    if isinstance(device, int) and not isinstance(device, bool):
        return 0 <= device < torch.cuda.device_count()
    if device in ("disk", "meta", "cpu"):
        return True
    parsed = torch.device(device)
    if parsed.type == "cuda":
        return torch.cuda.is_available() and (parsed.index or 0) < torch.cuda.device_count()
    if parsed.type == "mps":
        return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()
    accelerator = getattr(torch, parsed.type, None)
    return bool(accelerator is not None and getattr(accelerator, "is_available", lambda: False)())


def _is_device(device: Any) -> bool:
    """Whether ``device`` names a device on some machine (this one or not): a GPU index, ``"disk"``,
    or anything ``torch.device`` parses."""
    if isinstance(device, int) and not isinstance(device, bool):
        return device >= 0
    if device == "disk":
        return True
    try:
        torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


def check_device_map(model: nn.Module, device_map: Mapping[str, DeviceLike]) -> None:
    """Raises a ``ValueError`` naming what is wrong with ``device_map`` for ``model``.

    Checks that every parameter and buffer is placed and that every value is a device. As upstream,
    the devices need not exist on this machine (a map may be planned for another one; moving
    weights there is what fails), and names the model lacks do not fail the check: they are named
    in a warning (upstream ignores them silently).
    """
    weights = list(model.state_dict(keep_vars=True))  # keep_vars: names only, no detached copies
    known = {name for name, _ in model.named_modules()}
    known |= set(weights)
    unknown = [key for key in device_map if key not in known]
    if unknown:  # the other names of tied parameters, non-persistent buffers
        known |= {name for name, _ in model.named_parameters(remove_duplicate=False)}
        known |= {name for name, _ in model.named_buffers(remove_duplicate=False)}
        unknown = [key for key in device_map if key not in known]
    if unknown:
        warnings.warn(
            f"device_map names {unknown}, which {type(model).__name__} does not have; these entries place "
            f"nothing. Use names from model.named_modules() (top level: "
            f"{[name for name, _ in model.named_children()][:10]}).",
            UserWarning,
            stacklevel=2,
        )
    bad = {key: device for key, device in device_map.items() if not _is_device(device)}
    if bad:
        raise ValueError(
            f"device_map places {bad} on values that are not devices; use a GPU index (0, 1, ...), "
            "a torch device such as 'cuda:0', 'cpu' or 'disk'"
        )
    unplaced = [] if "" in device_map else [name for name in weights if device_of(name, device_map) is None]
    if unplaced:
        shown = ", ".join(unplaced[:20]) + (" ..." if len(unplaced) > 20 else "")
        raise ValueError(
            f"device_map does not place every weight: {len(unplaced)} parameter(s)/buffer(s) without a device: "
            f"{shown}. Add entries for them (or their modules), or {{'': device}} for the whole model."
        )


def check_devices_here(device_map: Mapping[str, DeviceLike], caller: str) -> None:
    """Raises before weights are moved onto a device of ``device_map`` that this machine lacks.

    Upstream fails midway, with whatever torch raises for that device (a ``RuntimeError`` or, on a
    build without CUDA, an ``AssertionError``). This raises the same exception type, but before
    anything moved, and names the blocks, the device and the way out.
    """
    absent: dict[str, list[str]] = {}
    first: DeviceLike | None = None
    for name, device in device_map.items():
        if str(device) not in OFFLOAD_DEVICES and not _device_here(device):
            absent.setdefault(repr(device), []).append(name)
            first = device if first is None else first
    if first is None:
        return
    placed = "; ".join(f"{names} on {device}" for device, names in absent.items())
    message = (
        f"{caller}: the device_map puts {placed}, which this machine does not have "
        f"({torch.cuda.device_count()} GPU(s) visible). Planning such a map here works (infer_auto_device_map, "
        "get_balanced_memory); to load or dispatch here, map those blocks to 'cpu', 'disk' or a device "
        "this machine has."
    )
    raise _torch_error_like(first, message)


def _torch_error_like(device: DeviceLike, message: str) -> BaseException:
    """``message`` in the exception type torch raises for a tensor on ``device`` (it depends on the build)."""
    try:
        torch.empty(0, device=device)  # an int is the current accelerator type's index, as in Tensor.to
    except Exception as exc:  # any type: this is only a probe of torch's own error
        try:
            error = type(exc)(message)
        except Exception:  # an exception type that does not take a plain message
            return RuntimeError(message)
        error.__cause__ = exc
        return error
    return RuntimeError(message)


def _tied_outside(name: str, tied_groups: list[list[str]]) -> list[str]:
    """Parameters tied to a parameter inside ``name`` but living outside it."""
    inside = f"{name}."
    outside: list[str] = []
    for group in tied_groups:
        if any(p.startswith(inside) or p == name for p in group):
            outside += [p for p in group if not (p.startswith(inside) or p == name)]
    return outside


def _owner(param: str, modules: list[tuple[str, Any]]) -> int | None:
    for position, (name, _) in enumerate(modules):
        if param == name or param.startswith(f"{name}."):
            return position
    return None


def _split(name: str, module: Any, no_split: Sequence[str]) -> list[tuple[str, Any]] | None:
    """The parts ``module`` breaks into for placement (own tensors and children), or None if it is atomic."""
    if not isinstance(module, nn.Module) or type(module).__name__ in no_split:
        return None
    children = list(module.named_children())
    if not children:
        return None
    own = [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]
    return [(f"{name}.{part}", value) for part, value in [*own, *children]]


def fallback_allocate(
    modules: list[tuple[str, Any]],
    module_sizes: Mapping[str, int],
    size_limit: int,
    no_split_module_classes: Sequence[str] | None = None,
    tied_parameters: list[list[str]] | None = None,
) -> tuple[str | None, Any, list[tuple[str, Any]]]:
    """Finds the first block in ``modules`` (splitting modules as needed) that fits in ``size_limit``.

    Used so a device is not left empty because the next block in order is too large for it. Blocks
    with parameters tied outside themselves are skipped (they must move with their partners).

    Returns:
        ``(name, module, remaining modules)``, or ``(None, None, modules)`` when nothing fits.
    """
    no_split = list(no_split_module_classes or [])
    ties = tied_parameters or []
    todo = list(modules)
    for position in range(len(todo)):
        stack = [todo[position]]
        while stack:
            name, module = stack.pop(0)
            if module_sizes.get(name, 0) <= size_limit and not _tied_outside(name, ties):
                remaining = _without(todo, position, name)
                return name, module, remaining
            parts = _split(name, module, no_split)
            if parts is not None:
                stack = parts + stack
    return None, None, list(modules)


def _without(modules: list[tuple[str, Any]], position: int, taken: str) -> list[tuple[str, Any]]:
    """``modules`` with block ``taken`` removed from the entry at ``position`` (split if it is inside it)."""
    top_name, top = modules[position]
    if top_name == taken:
        return modules[:position] + modules[position + 1 :]
    replacement: list[tuple[str, Any]] = []
    stack = [(top_name, top)]
    while stack:
        name, module = stack.pop(0)
        if name == taken:
            continue
        if taken.startswith(f"{name}."):
            stack = (_split(name, module, []) or []) + stack
        else:
            replacement.append((name, module))
    return modules[:position] + replacement + modules[position + 1 :]


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
    """A device map filling the GPUs in order, then the CPU, then the disk, block by block.

    Blocks are the model's submodules; a block too large for what is left on a device is split
    into its children, unless its class is in ``no_split_module_classes`` (then it moves on whole).
    Parameters tied together are placed together. When some blocks are offloaded, the execution
    device keeps room for the largest block, which is loaded there during forward.

    Args:
        model: the model (its weights may be on the meta device).
        max_memory: bytes per device, e.g. ``{0: "10GiB", "cpu": "30GiB", "disk": "200GB"}``. Default:
            what is free on each GPU and in RAM. As upstream, the disk takes what the other devices
            cannot hold even when not listed (without limit); ``"disk": 0`` refuses the disk, and
            another ``"disk"`` size limits it.
        no_split_module_classes: class names never split across devices (e.g. ``["LlamaDecoderLayer"]``).
        dtype: dtype the weights will be loaded in (floating weights only shrink, never grow).
        special_dtypes: per-tensor dtypes that override ``dtype``.
        verbose: print each decision (as upstream does).
        clean_result: merge entries of one module that share a device.
        offload_buffers: buffers of offloaded blocks are offloaded too (otherwise they are counted on
            the execution device).
        fallback_allocation: when the next block does not fit on a device, try to place a smaller
            later block there instead of leaving the device empty.

    Raises:
        ValueError: a block does not fit on any allowed device; the message names it and its size.

    Example:
        >>> with init_empty_weights():
        ...     model = MyModel()
        >>> infer_auto_device_map(model, max_memory={"cpu": "2GB", "disk": "100GB"}, no_split_module_classes=["Block"])
        {'embed': 'cpu', 'blocks.0': 'cpu', 'blocks.1': 'disk', 'head': 'cpu'}
    """
    no_split = list(no_split_module_classes or [])
    budgets: dict[int | str, float] = dict(get_max_memory(max_memory))
    budgets.setdefault("disk", float("inf"))  # upstream's last resort; a user's "disk": 0 refuses it
    if budgets["disk"] == 0:
        del budgets["disk"]
    devices = list(budgets)
    sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    ties = find_tied_parameters(model)
    # The root's own tensors go first, so they land on the execution device: the root's hook moves
    # inputs and outputs but does not offload, so they must not be sent to the disk.
    top: list[tuple[str, Any]] = [
        *model.named_parameters(recurse=False),
        *model.named_buffers(recurse=False),
        *model.named_children(),
    ]
    if not top:
        return {"": devices[0]}
    execution = next((d for d in devices if d not in OFFLOAD_DEVICES), "cpu")
    storage_total = sum(budget for device, budget in budgets.items() if device != "disk")
    # Offloaded blocks are loaded onto the execution device during forward: keep room for the largest.
    can_offload = "disk" in budgets or (execution != "cpu" and "cpu" in budgets)
    too_big = sizes[""] > storage_total or (execution != "cpu" and sizes[""] > budgets[execution])
    offloading = can_offload and too_big
    reserve = get_max_layer_size(top, sizes, no_split)[0] if offloading else 0
    if offloading and not offload_buffers:
        # Buffers of offloaded blocks stay on the execution device (the CPU included) unless they are
        # offloaded too; which blocks will be offloaded is not known yet, so all buffers are counted.
        reserve += sum(buffer.numel() * buffer.element_size() for buffer in model.buffers())
    device_map: dict[str, DeviceLike] = {}
    slot = 0
    used = 0.0
    todo = top
    while todo:
        device = devices[slot]
        budget = budgets[device] - (reserve if device == execution else 0)
        name, module = todo.pop(0)
        outside = [p for p in _tied_outside(name, ties) if device_of(p, device_map) is None]
        partners = sorted({pos for p in outside if (pos := _owner(p, todo)) is not None})
        partner_names = [todo[pos][0] for pos in partners]
        need = _size_with_partners(name, partner_names, outside, sizes)
        if used + need <= budget:
            for block in [name, *partner_names]:
                device_map[block] = device
                if verbose:
                    print(f"infer_auto_device_map: {block!r} ({sizes[block]} bytes) -> {device!r}")
            todo = [entry for position, entry in enumerate(todo) if position not in partners]
            used += need
            continue
        parts = _split(name, module, no_split)
        if parts is not None:
            if verbose:
                print(f"infer_auto_device_map: splitting {name!r} ({sizes[name]} bytes) to fit {device!r}")
            todo = parts + todo
            continue
        if fallback_allocation and used == 0 and slot < len(devices) - 1:
            found, found_module, rest = fallback_allocate([(name, module), *todo], sizes, int(budget), no_split, ties)
            if found is not None:
                if verbose:
                    print(f"infer_auto_device_map: {found!r} ({sizes[found]} bytes) -> {device!r} (fallback)")
                device_map[found] = device
                used += sizes[found]
                todo = rest
                continue
        if slot == len(devices) - 1:
            raise ValueError(
                _no_room_message(name, module, need, bool(partner_names), budgets, reserve, execution, no_split)
            )
        todo.insert(0, (name, module))
        if verbose:
            print(f"infer_auto_device_map: {name!r} ({sizes[name]} bytes) does not fit on {device!r}; next device")
        slot += 1
        used = 0.0
    return clean_device_map(device_map) if clean_result else device_map


def _no_room_message(
    name: str,
    module: Any,
    need: float,
    tied: bool,
    budgets: Mapping[Any, float],
    reserve: int,
    execution: Any,
    no_split: Sequence[str],
) -> str:
    allowed = ", ".join(f"{device!r}: {int(size)}" for device, size in budgets.items() if size != float("inf"))
    kept = f"; {reserve} bytes of {execution!r} are kept free to load offloaded blocks into" if reserve else ""
    fixes = "raise max_memory or allow the disk (drop \"'disk': 0\" from it and pass an offload folder)"
    if "disk" in budgets:
        fixes = "raise max_memory (the disk's too)"
    if type(module).__name__ in no_split:
        fixes += f", or remove {type(module).__name__!r} from no_split_module_classes"
    return (
        f"infer_auto_device_map: block {name!r} ({type(module).__name__}, {int(need)} bytes"
        f"{' with the modules its parameters are tied to' if tied else ''}) does not fit on any device "
        f"(max_memory {{{allowed}}}{kept}). To fix it, {fixes}."
    )


def _size_with_partners(name: str, partners: list[str], outside: list[str], sizes: Mapping[str, int]) -> int:
    total = sizes[name] + sum(sizes[p] for p in partners)
    # A tied parameter inside a partner is the same storage as the one inside ``name``: count it once.
    for param in outside:
        if any(param == p or param.startswith(f"{p}.") for p in partners):
            total -= sizes.get(param, 0)
    return total

