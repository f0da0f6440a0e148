"""How many bytes a model, each of its submodules and each tensor takes (optionally in another dtype)."""

from __future__ import annotations

import enum
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn


class CustomDtype(enum.Enum):
    """Storage types torch has no dtype for (quantised weights); sized by :func:`dtype_byte_size`."""

    FP8 = "fp8"
    INT4 = "int4"
    INT2 = "int2"


_CUSTOM_BYTES: dict[CustomDtype, float] = {CustomDtype.FP8: 1, CustomDtype.INT4: 0.5, CustomDtype.INT2: 0.25}
_BITS = re.compile(r"[^\d](\d+)_?")


def dtype_byte_size(dtype: torch.dtype | CustomDtype) -> float:
    """Bytes per element: ``dtype_byte_size(torch.float16) == 2``; ``torch.bool`` counts 1/8."""
    if isinstance(dtype, CustomDtype):
        return _CUSTOM_BYTES[dtype]
    if dtype == torch.bool:
        return 1 / 8
    found = _BITS.search(str(dtype))
    if found is None:
        raise ValueError(f"dtype_byte_size: {dtype!r} is not a sized torch dtype (e.g. torch.float16)")
    return int(found.group(1)) // 8


def convert_file_size_to_int(size: int | str) -> int:
    """Bytes in ``size``: an int, or a string like ``"5GB"`` (10**9), ``"5GiB"`` (2**30), ``"500MB"``.

    A unit written with a lowercase ``b`` (``"5Gb"``) means bits and is divided by 8. Zero (``0``,
    ``"0MB"``) is 0, as upstream; a negative size is an error.
    """
    from accelerate.storage.sizes import parse_size

    if isinstance(size, int) and not isinstance(size, bool):
        if size < 0:
            raise ValueError(
                f"convert_file_size_to_int: {size!r} is negative; a size is a number of bytes >= 0"
            )
        return size
    if isinstance(size, str):
        bits = size.strip().endswith("b") and not size.strip().upper().endswith("IB")
        text = size.strip()[:-1] + "B" if bits else size
        zero = re.fullmatch(r"\s*0*(?:\.0*)?\s*([A-Za-z]*)\s*", text)
        if zero is not None and any(c == "0" for c in text):
            text = "1" + zero.group(1)  # parse_size wants a positive size: check the unit with 1 of it
        try:
            value = parse_size(text)
        except ValueError as error:
            raise ValueError(
                f"convert_file_size_to_int: {size!r} is not a size; use an int (bytes) or a string with a unit such "
                "as '5GB', '500MB' or '2GiB'"
            ) from error
        if zero is not None and any(c == "0" for c in size):
            return 0
        return value // 8 if bits else value
    raise TypeError(f"convert_file_size_to_int: expected an int or a string like '5GB', got {size!r}")


def _as_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"{dtype!r} is not a torch dtype; use e.g. torch.float16 or 'bfloat16'")
    return resolved


def tensor_nbytes(
    name: str,
    tensor: torch.Tensor,
    dtype: torch.dtype | None = None,
    special_dtypes: Mapping[str, str | torch.dtype] | None = None,
) -> float:
    """Bytes of ``tensor`` as it will be stored: in ``special_dtypes[name]``, else ``dtype`` if that is smaller."""
    if special_dtypes is not None and name in special_dtypes:
        given = special_dtypes[name]
        # A CustomDtype (e.g. INT4 for 4-bit quantized weights) has no torch dtype but a known size.
        special = given if isinstance(given, CustomDtype) else _as_dtype(given)
        assert special is not None
        return tensor.numel() * dtype_byte_size(special)
    own = dtype_byte_size(tensor.dtype)
    if dtype is None or not tensor.is_floating_point():
        return tensor.numel() * own
    # Casting never widens: an fp16 weight asked for float32 stays fp16 (as loading does).
    return tensor.numel() * min(own, dtype_byte_size(dtype))


def compute_module_sizes(
    model: nn.Module,
    dtype: str | torch.dtype | None = None,
    special_dtypes: Mapping[str, str | torch.dtype] | None = None,
    buffers_only: bool = False,
) -> dict[str, int]:
    """Bytes per name: ``""`` is the whole model, then every submodule and every tensor by dotted name.

    Tied parameters are counted once. Missing names read as 0 (a ``defaultdict``).
    """
    wanted = _as_dtype(dtype)
    sizes: defaultdict[str, int] = defaultdict(int)
    tensors: list[tuple[str, torch.Tensor]] = [] if buffers_only else list(model.named_parameters())
    tensors += list(model.named_buffers())
    for name, tensor in tensors:
        size = int(tensor_nbytes(name, tensor, wanted, special_dtypes))
        parts = name.split(".")
        for depth in range(len(parts) + 1):
            sizes[".".join(parts[:depth])] += size
    return sizes


def compute_module_total_buffer_size(
    model: nn.Module,
    dtype: str | torch.dtype | None = None,
    special_dtypes: Mapping[str, str | torch.dtype] | None = None,
) -> int:
    """Bytes of all buffers of ``model``."""
    return compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes, buffers_only=True).get(
        "", 0
    )


def _splittable(module: Any, no_split_module_classes: Sequence[str] | None) -> bool:
    return (
        isinstance(module, nn.Module)
        and len(list(module.children())) > 0
        and type(module).__name__ not in (no_split_module_classes or ())
    )


def get_max_layer_size(
    modules: list[tuple[str, Any]],
    module_sizes: Mapping[str, int],
    no_split_module_classes: Sequence[str] | None,
) -> tuple[int, list[str]]:
    """The largest block that is never split (a leaf or a ``no_split_module_classes`` module) and its names.

    Args:
        modules: ``(name, module or tensor)`` pairs to search, e.g. the model's children.
        module_sizes: from :func:`compute_module_sizes`.
        no_split_module_classes: class names kept whole.

    Returns:
        ``(size, names)``: every block of that size.
    """
    best = 0
    names: list[str] = []
    todo = list(modules)
    while todo:
        name, module = todo.pop(0)
        if _splittable(module, no_split_module_classes):
            todo = [(f"{name}.{child}", sub) for child, sub in module.named_children()] + todo
            continue
        size = module_sizes.get(name, 0)
        if size > best:
            best, names = size, [name]
        elif size == best and size > 0:
            names.append(name)
    return best, names


def calculate_maximum_sizes(model: nn.Module) -> tuple[int, tuple[int, list[str]]]:
    """``(total bytes, (largest unsplittable block bytes, its names))`` of ``model``."""
    sizes = compute_module_sizes(model)
    no_split: list[str] = list(getattr(model, "_no_split_modules", None) or [])
    top: list[tuple[str, Any]] = [
        *model.named_parameters(recurse=False),
        *model.named_children(),
        *model.named_buffers(recurse=False),
    ]
    return sizes[""], get_max_layer_size(top, sizes, no_split)


def get_module_leaves(module_sizes: Mapping[str, int]) -> list[str]:
    """Names in ``module_sizes`` that have no entry below them (parameters and buffers, mostly)."""
    parents = {name.rsplit(".", 1)[0] for name in module_sizes if "." in name}
    return [name for name in module_sizes if name and name not in parents]


def get_module_size_with_ties(
    tied_params: list[str],
    module_size: int,
    module_sizes: Mapping[str, int],
    modules_to_treat: list[tuple[str, Any]],
) -> tuple[int, list[str], list[Any]]:
    """Size of a module together with the modules holding parameters tied to it (shared bytes once).

    Returns:
        ``(total size, names of the tied modules, the tied modules)``, the tied modules being taken
        from ``modules_to_treat``.
    """
    if not tied_params:
        return module_size, [], []
    names: list[str] = []
    modules: list[Any] = []
    total = module_size
    for param in tied_params:
        for name, module in modules_to_treat:
            if name and (param == name or param.startswith(f"{name}.")) and name not in names:
                names.append(name)
                modules.append(module)
                # The shared parameter is already counted in ``module_size``.
                total += module_sizes.get(name, 0) - module_sizes.get(param, 0)
                break
    return total, names, modules
