"""Device maps: which device holds each block of a model, inferred from memory budgets or checked.

A device map maps module (or tensor) names to a GPU index, ``"cpu"``, ``"disk"`` or another torch
device; the longest matching name decides where a tensor goes. ``""`` is the whole model.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from accelerate.big_modeling.tensors import DeviceLike

OFFLOAD_DEVICES = ("cpu", "disk")


def device_of(name: str, device_map: Mapping[str, DeviceLike]) -> DeviceLike | None:
    """The device ``device_map`` gives ``name`` (its longest matching entry), or None."""
    best: str | None = None
    for key in device_map:
        if (key == "" or name == key or name.startswith(f"{key}.")) and (
            best is None or len(key) > len(best)
        ):
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
    in a warning worded as upstream's (which also warns about tensor names; we accept those).
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
            f"The following device_map keys do not match any submodules in the model: {unknown}. "
            f"These entries place nothing; use names from model.named_modules() (top level: "
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
