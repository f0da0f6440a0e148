"""Memory budgets per device (``max_memory``): what is free, what the user allows, balanced splits."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from accelerate.big_modeling.sizes import compute_module_sizes, convert_file_size_to_int, get_module_leaves

MaxMemory = dict[int | str, int]
logger = logging.getLogger(__name__)


def _available_cpu_bytes() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:  # psutil is optional: the kernel's page counts are a fair fallback
        import os

        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None)) and torch.backends.mps.is_available()


def _device_key(key: Any) -> int | str:
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, torch.device):
        key = str(key)
    if isinstance(key, str):
        if key.isdigit():
            return int(key)
        if key.startswith("cuda:") and key[5:].isdigit():
            return int(key[5:])
        if key == "cuda":
            return 0
        return key
    raise ValueError(
        f"max_memory: {key!r} is not a device; use GPU indices (0, 1, ...), 'mps', 'cpu' or 'disk'"
    )


def _order(key: int | str) -> tuple[int, int | str]:
    if isinstance(key, int):
        return 0, key
    return {"mps": 1, "cpu": 2, "disk": 3}.get(key, 1), key


def get_max_memory(max_memory: Mapping[Any, int | str] | None = None) -> MaxMemory:
    """Bytes allowed per device, ordered GPUs, ``"mps"``, ``"cpu"``, ``"disk"``.

    Without ``max_memory``: the free memory of every GPU and the available RAM. With it: sizes such as
    ``"10GiB"`` are converted to bytes; a GPU (or ``"mps"``) this machine lacks is kept with a
    warning, so a device map can be planned here for another machine (as upstream).

    Raises:
        ValueError: a key that is no device at all (e.g. ``"gpu0"``).

    Example:
        >>> get_max_memory({0: "10GiB", "cpu": "30GiB"})
        {0: 10737418240, 'cpu': 32212254720}
    """
    if max_memory is None:
        found: MaxMemory = {}
        for index in range(torch.cuda.device_count()):
            try:
                found[index] = int(torch.cuda.mem_get_info(index)[0])
            except RuntimeError:
                continue
        if _mps_available():
            found["mps"] = _available_cpu_bytes()
        found["cpu"] = _available_cpu_bytes()
        return found
    result: MaxMemory = {}
    gpus = torch.cuda.device_count()
    for raw_key, value in max_memory.items():
        key = _device_key(raw_key)
        if isinstance(key, str) and key not in ("cpu", "disk", "mps"):
            raise ValueError(
                f"max_memory key {raw_key!r} is not a device; use GPU indices (0, 1, ...), 'mps', 'cpu' or 'disk'"
            )
        # A device this machine lacks is kept, with a warning (as upstream): planning a device map
        # here for another machine is a real use. Moving weights onto it is what fails, later.
        if isinstance(key, int) and not 0 <= key < gpus:
            logger.warning(
                "max_memory names GPU %r, which this machine does not have (visible GPUs: %s); its budget is "
                "kept for planning, but weights cannot be moved there here",
                raw_key,
                list(range(gpus)),
            )
        if key == "mps" and not _mps_available():
            logger.warning(
                "max_memory names 'mps', which is not available on this machine; kept for planning"
            )
        result[key] = convert_file_size_to_int(value)
    return dict(sorted(result.items(), key=lambda item: _order(item[0])))


def get_balanced_memory(
    model: nn.Module,
    max_memory: Mapping[Any, int | str] | None = None,
    no_split_module_classes: Sequence[str] | None = None,
    dtype: str | torch.dtype | None = None,
    special_dtypes: Mapping[str, str | torch.dtype] | None = None,
    low_zero: bool = False,
) -> MaxMemory:
    """A ``max_memory`` that spreads the model evenly over the GPUs instead of filling the first ones.

    Each GPU but the last gets the model size divided by the number of GPUs, plus room for one
    large block (so a block that does not fit exactly moves on instead of overflowing). With
    ``low_zero`` GPU 0 gets as little as possible (it keeps room for generation outputs). With one
    GPU and no ``max_memory``, 90% of its free memory is offered (room for activations). Without
    GPUs the budgets are returned unchanged.

    Example:
        >>> get_balanced_memory(model, max_memory={0: "10GiB", 1: "10GiB", "cpu": "30GiB"})
    """
    budgets = get_max_memory(max_memory)
    return balance_budgets(
        model,
        budgets,
        no_split_module_classes,
        dtype,
        special_dtypes,
        low_zero,
        user_set=max_memory is not None,
    )


def balance_budgets(
    model: nn.Module,
    budgets: MaxMemory,
    no_split_module_classes: Sequence[str] | None = None,
    dtype: str | torch.dtype | None = None,
    special_dtypes: Mapping[str, str | torch.dtype] | None = None,
    low_zero: bool = False,
    user_set: bool = True,
) -> MaxMemory:
    """:func:`get_balanced_memory` on budgets already in bytes (``budgets`` is changed and returned)."""
    gpus = sorted(key for key, value in budgets.items() if isinstance(key, int) and value > 0)
    if not gpus:
        return budgets
    if len(gpus) == 1:
        if not user_set:
            budgets[gpus[0]] = int(budgets[gpus[0]] * 0.9)  # what is free now is not all usable
        return budgets  # nothing to balance against
    sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    share = sizes[""] // (len(gpus) - 1 if low_zero else len(gpus))
    no_split = set(no_split_module_classes or ())
    # As upstream: each no-split class is measured by its first block that holds tensors.
    first: dict[str, int] = {}
    for name, module in model.named_modules():
        kind = type(module).__name__
        if name and name in sizes and kind in no_split:
            first.setdefault(kind, sizes[name])
    blocks = list(first.values())
    # The leaves of the module tree (not the tensors): the smallest pieces placement moves whole.
    tensors = set(get_module_leaves(sizes))
    modules = {name: size for name, size in sizes.items() if name not in tensors}
    leaves = get_module_leaves(modules)
    mean_leaf = sum(modules[name] for name in leaves) // max(len(leaves), 1)
    share += int(1.25 * max([mean_leaf, *blocks]))
    # The last GPU keeps its whole budget, in case the added room was not enough.
    for gpu in gpus[:-1]:
        if not (low_zero and gpu == gpus[0]):
            budgets[gpu] = min(budgets[gpu], share)
    if low_zero:
        others = sum(budgets[gpu] for gpu in gpus[1:])
        budgets[gpus[0]] = min(budgets[gpus[0]], max(0, sizes[""] - others))
    return budgets
