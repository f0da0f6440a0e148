"""Loading a checkpoint into a (possibly empty) model along a device map, offloading as it goes.

Weights are read one tensor at a time: each goes straight to its device, to the offload folder
(``"disk"``), or, with ``offload_state_dict``, to a temporary folder until the end, so the peak
memory is what stays in RAM plus one tensor.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from accelerate.big_modeling.device_map import check_device_map, check_devices_here, device_of
from accelerate.big_modeling.offload import (
    load_offloaded_weight,
    offload_weight,
    save_offload_index,
)
from accelerate.big_modeling.sizes import _as_dtype
from accelerate.big_modeling.streaming import StoredWeight, iter_weights, open_weights
from accelerate.big_modeling.tensors import (
    DeviceLike,
    find_tied_parameters,
    is_int8_parameter,
    named_module_tensors,
    retie_parameters,
    set_module_tensor_to_device,
    set_owned_tensor,
)
from accelerate.storage.errors import CheckpointError
from accelerate.storage.model_files import resolve_checkpoint

logger = logging.getLogger(__name__)


class LoadResult(NamedTuple):
    """What :func:`load_checkpoint_in_model` found: weights the model has but the checkpoint lacks
    (tied names filled through their partner do not count), and checkpoint entries the model lacks."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class CheckpointMismatchError(CheckpointError, ValueError):
    """The checkpoint does not fit the model: missing or unexpected weights, or a shape mismatch.

    Both a ``ValueError`` (what the big-model loaders raise for a bad device map or checkpoint) and a
    :class:`~accelerate.storage.errors.CheckpointError` (a ``RuntimeError``, like
    ``nn.Module.load_state_dict(strict=True)``), so handlers written for either keep working.
    """


def load_state_dict(
    checkpoint_file: str | os.PathLike[str], device_map: Mapping[str, DeviceLike] | None = None
) -> dict[str, torch.Tensor]:
    """Reads one weights file (``.safetensors`` or ``.bin``); with ``device_map`` each tensor goes to its device.

    Tensors mapped to ``"disk"`` are returned on the CPU.
    """
    state: dict[str, torch.Tensor] = {}
    for name, tensor in iter_weights(checkpoint_file):
        device = device_of(name, device_map) if device_map is not None else None
        if device is None or device == "disk":
            state[name] = tensor
        else:
            state[name] = tensor.to(f"cuda:{device}" if isinstance(device, int) else device)
    return state


def _tied_and_aliased(tied: list[list[str]], aliases: Mapping[str, str]) -> dict[str, list[str]]:
    """Stored name -> the other names that take the same tensor: its tied partners, and the names a
    shard index records as aliases of it (shared tensors are written once)."""
    others: dict[str, list[str]] = {}
    for group in tied:
        for name in group:
            others.setdefault(name, []).extend(p for p in group if p != name)
    for alias, target in aliases.items():
        if alias not in others.setdefault(target, []):
            others[target].append(alias)
    return others


def _names_of(weight: StoredWeight, partners: Mapping[str, list[str]]) -> list[str]:
    """The names a stored tensor fills: its own, the file's aliases of it, and the names tied to any
    of those (checkpoints often store one name of a tied group).

    Tied names can sit on different devices in a device map (one on disk, one in RAM), so each must
    be placed, not only the name the file happens to use.
    """
    names = [weight.name, *weight.aliases]
    for name in list(names):
        names += [p for p in partners.get(name, ()) if p not in names]
    return names


def _cast(value: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    return value.to(dtype) if dtype is not None and value.is_floating_point() else value


def _on_cpu(device: DeviceLike) -> bool:
    return not isinstance(device, int) and torch.device(device).type == "cpu"


def _keeps_fp32(name: str, keep_in_fp32_modules: Sequence[str] | None) -> bool:
    return any(
        module == name or name.startswith(f"{module}.") or f".{module}." in f".{name}"
        for module in keep_in_fp32_modules or ()
    )


def load_checkpoint_in_model(
    model: nn.Module,
    checkpoint: str | os.PathLike[str],
    device_map: Mapping[str, DeviceLike] | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
    dtype: str | torch.dtype | None = None,
    offload_state_dict: bool = False,
    offload_buffers: bool = False,
    keep_in_fp32_modules: list[str] | None = None,
    offload_8bit_bnb: bool = False,
    strict: bool = False,
    full_state_dict: bool = True,
    broadcast_from_rank0: bool = False,
) -> LoadResult:
    """Loads ``checkpoint`` into ``model`` in place, placing each weight per ``device_map``.

    The one loader behind ``accelerate.load_checkpoint_in_model``, ``accelerate.utils`` /
    ``accelerate.utils.modeling.load_checkpoint_in_model`` and ``load_checkpoint_and_dispatch``.
    Shards are read one at a time. Parameters that already hold data keep their identity (tied
    names and optimizers that reference them stay valid); meta parameters are replaced, and tied
    names are pointed at the replacement again.

    Args:
        model: the model; its weights may be on the meta device (``init_empty_weights``).
        checkpoint: a ``.safetensors`` / ``.bin`` / ``.pt`` file, a ``*.index.json`` of shards, or a
            folder holding an index, ``model.safetensors`` / ``pytorch_model.bin`` or one weights file.
        device_map: module name -> device, longest prefix wins (``{"": "cpu"}`` for all);
            ``"disk"`` weights go to ``offload_folder`` and stay on the meta device in the model.
            Default: everything on its current device (the CPU for meta weights).
        offload_folder: where ``"disk"`` weights go (required if the map uses the disk).
        dtype: floating weights are cast to it (except under ``keep_in_fp32_modules``); default:
            the model's dtype for each weight. Integer buffers never change dtype.
        offload_state_dict: park CPU weights in a temporary folder while loading and read them back
            at the end, so a checkpoint larger than RAM can still be split across CPU and disk.
        offload_buffers: write the buffers of disk blocks to the offload folder too.
        keep_in_fp32_modules: module names whose weights stay float32 whatever ``dtype`` says.
        offload_8bit_bnb: the weights of bitsandbytes 8-bit layers that go to the disk are quantized
            first and written as int8 values with their per-row scales (``<layer>.SCB``), which the
            offload hooks hand back to the layer on each forward.
        strict: raise if the checkpoint lacks weights of the model or has extra ones (otherwise
            they are logged).
        full_state_dict, broadcast_from_rank0: distributed loading of sharded (DTensor) models;
            not available here, accepted at their defaults.

    Returns:
        ``LoadResult(missing_keys, unexpected_keys)`` (upstream returns None; callers may ignore it).

    Raises:
        CheckpointMismatchError: (a ``ValueError`` and a ``CheckpointError``) a shape differs, or
            the checkpoint misses weights of the model (when ``strict``, or when a weight would
            otherwise stay on the meta device with no data) or has extra ones (when ``strict``).
        ValueError: the device map does not fit the model, or uses the disk without ``offload_folder``.

    Example:
        >>> with init_empty_weights():
        ...     model = MyModel()
        >>> load_checkpoint_in_model(model, "ckpt/", device_map={"embed": "cpu", "blocks": "disk"}, offload_folder="off")
    """
    if broadcast_from_rank0:
        raise NotImplementedError(
            "load_checkpoint_in_model(broadcast_from_rank0=True) loads into sharded DTensor models: not available; "
            "load on every rank instead"
        )
    wanted = _as_dtype(dtype)
    if device_map is not None:
        check_device_map(model, device_map)
        check_devices_here(device_map, "load_checkpoint_in_model")
        if offload_folder is None and "disk" in {str(v) for v in device_map.values()}:
            raise ValueError(
                "load_checkpoint_in_model: the device_map sends some weights to 'disk' but no offload_folder was "
                "given; pass offload_folder='some/folder'"
            )
    files, aliases = resolve_checkpoint(checkpoint)
    if offload_folder is not None:
        os.makedirs(offload_folder, exist_ok=True)
    tied = find_tied_parameters(model)
    # The names a checkpoint should hold (what load_state_dict would want); non-persistent
    # buffers are not among them but still take a value a checkpoint happens to have.
    expected: dict[str, torch.Tensor] = model.state_dict(keep_vars=True)
    loadable: dict[str, torch.Tensor] = dict(model.named_parameters(remove_duplicate=False))
    loadable.update(model.named_buffers(remove_duplicate=False))
    buffers = {name for name, _ in model.named_buffers(remove_duplicate=False)}
    modules = dict(model.named_modules(remove_duplicate=False))  # looked up once, not per tensor
    disk_index: dict[str, Any] = {}
    parked_folder = tempfile.mkdtemp() if offload_state_dict else None
    parked_index: dict[str, Any] = {}
    parked_devices: dict[str, tuple[DeviceLike, torch.dtype | None]] = {}  # where each goes, in which dtype
    loaded: set[str] = set()
    unexpected: list[str] = []
    try:
        partners = _tied_and_aliased(tied, aliases)
        for file in files:
            in_place = Path(file).name.endswith(".safetensors")
            for weight in open_weights(file):
                for name in _names_of(weight, partners):
                    current = loadable.get(name)
                    if current is None:
                        unexpected.append(name)
                        continue
                    if weight.shape != tuple(current.shape):
                        raise CheckpointMismatchError(
                            f"Shape mismatch for {name!r}: the checkpoint has {weight.shape}, the model "
                            f"{tuple(current.shape)} (in {file})"
                        )
                    loaded.add(name)
                    target_dtype = torch.float32 if _keeps_fp32(name, keep_in_fp32_modules) else wanted
                    floating = weight.dtype.is_floating_point
                    mapped_to = device_of(name, device_map) if device_map is not None else None
                    # (not ``or``: GPU 0 is a device too)
                    device: DeviceLike = (
                        mapped_to
                        if mapped_to is not None
                        else ("cpu" if current.device.type == "meta" else current.device)
                    )
                    if device == "disk" and (name not in buffers or offload_buffers):
                        if offload_8bit_bnb and name.endswith(".weight") and is_int8_parameter(current):
                            from accelerate.big_modeling.quantization.loading import quantize_and_offload_8bit

                            folder: Any = offload_folder  # checked above: a disk map needs one
                            value = weight.tensor(mapped=False)
                            quantize_and_offload_8bit(
                                model, value, name, target_dtype, folder, disk_index, None
                            )
                            continue
                        if in_place and (target_dtype in (None, weight.dtype) or not floating):
                            # A safetensors checkpoint is read where it is: the index points into the file,
                            # nothing is read or written (the checkpoint must stay in place while the model
                            # is used).
                            disk_index[name] = {
                                "safetensors_file": os.fspath(Path(file).resolve()),
                                "weight_name": weight.name,
                                "dtype": str(weight.dtype).removeprefix("torch."),
                            }
                        else:
                            value = _cast(weight.tensor(mapped=False), target_dtype)
                            offload_weight(value, name, offload_folder, index=disk_index)  # type: ignore[arg-type]
                        continue
                    if device == "disk":
                        device = "cpu"
                    if parked_folder is not None and str(device) == "cpu":
                        offload_weight(
                            _cast(weight.tensor(mapped=False), target_dtype),
                            name,
                            parked_folder,
                            index=parked_index,
                        )
                        parked_devices[name] = (device, target_dtype)
                        continue
                    # Where the weight stays on the CPU in the file's dtype, the model takes a view of the
                    # file's private mapping (no copy, like safetensors' load_file); anything cast or
                    # moved is read into memory of its own first, so the file's pages do not stay
                    # resident for it.
                    kept = (target_dtype or current.dtype) if floating else weight.dtype
                    value = weight.tensor(mapped=_on_cpu(device) and kept == weight.dtype)
                    module_name, _, attr = name.rpartition(".")
                    set_owned_tensor(
                        modules[module_name],
                        attr,
                        name,
                        device,
                        value=_cast(value, target_dtype),
                        dtype=target_dtype,
                    )
            if offload_folder is not None:
                save_offload_index(disk_index, offload_folder)
        for name, info in parked_index.items():
            parked = load_offloaded_weight(Path(parked_folder) / f"{name}.dat", info)  # type: ignore[arg-type]
            device, target_dtype = parked_devices[name]
            # The requested dtype again: without it the value would take the model's own dtype.
            set_module_tensor_to_device(model, name, device, value=parked, dtype=target_dtype)
    finally:
        if parked_folder is not None:
            shutil.rmtree(parked_folder, ignore_errors=True)
    retie_parameters(model, tied)
    return _report(model, checkpoint, expected, loaded, unexpected, tied, strict, device_map)


def _report(
    model: nn.Module,
    checkpoint: Any,
    expected: Mapping[str, torch.Tensor],
    loaded: set[str],
    unexpected: list[str],
    tied: list[list[str]],
    strict: bool,
    device_map: Mapping[str, DeviceLike] | None,
) -> LoadResult:
    tied_loaded = {name for group in tied if any(n in loaded for n in group) for name in group}
    # A tensor shared by several names (tied, or the same buffer twice) is filled through any of them.
    filled = {id(expected[name]) for name in loaded if name in expected}
    missing = [
        name
        for name in expected
        if name not in loaded and name not in tied_loaded and id(expected[name]) not in filled
    ]
    # A weight with no data and no checkpoint entry is unusable whatever ``strict`` says.
    empty = [
        name
        for name in missing
        if expected[name].device.type == "meta"
        and (device_map is None or device_of(name, device_map) != "disk")
        and _get(model, name).device.type == "meta"
    ]
    if strict and (missing or unexpected) or empty:
        problems = []
        if missing:
            problems.append(f"missing from the checkpoint: {_list(missing)}")
        if unexpected and strict:
            problems.append(f"in the checkpoint but not in the model: {_list(unexpected)}")
        raise CheckpointMismatchError(
            f"load_checkpoint_in_model({checkpoint}) into {type(model).__name__}: "
            + "; ".join(problems)
            + ("" if strict else " (these weights would stay on the meta device, without data)")
        )
    if missing:
        logger.warning("Loaded %s with missing keys %s", checkpoint, missing)
    if unexpected and not strict:  # upstream's words
        logger.warning(
            "Some weights of the model checkpoint at %s were not used when initializing %s: %s. This may or may not "
            "be an issue - make sure that the checkpoint does not have unnecessary parameters, or that the model "
            "definition correctly corresponds to the checkpoint.",
            checkpoint,
            type(model).__name__,
            unexpected,
        )
    return LoadResult(missing, sorted(unexpected))


def _list(names: list[str]) -> str:
    return ", ".join(names[:30]) + (f" ... ({len(names)} in all)" if len(names) > 30 else "")


def _get(model: nn.Module, name: str) -> torch.Tensor:
    module_name, _, attr = name.rpartition(".")
    module = model.get_submodule(module_name) if module_name else model
    value = getattr(module, attr)
    assert isinstance(value, torch.Tensor)
    return value


def load_offloaded_weights(
    model: nn.Module, index: Mapping[str, Any], offload_folder: str | os.PathLike[str]
) -> None:
    """Loads every weight of an offload folder (its ``index``) back into ``model`` on the CPU.

    Tied parameters stay tied: replacing a meta placeholder makes a new parameter, so the names
    tied to it are pointed at that one again.
    """
    if not index:
        return
    tied = find_tied_parameters(model)
    for name, info in index.items():
        weight = load_offloaded_weight(Path(offload_folder) / f"{name}.dat", info)
        set_module_tensor_to_device(model, name, "cpu", value=weight)
    retie_parameters(model, tied)


def get_state_dict_from_offload(
    module: nn.Module,
    module_name: str,
    state_dict: dict[str, torch.Tensor],
    device_to_put_offload: DeviceLike = "cpu",
) -> dict[str, torch.Tensor]:
    """Adds the weights of an offloaded ``module`` (named ``module_name``) to ``state_dict``, loaded from its hook."""
    from accelerate.big_modeling.tensors import _offload_hook, align_module_device

    whole = bool(getattr(_offload_hook(module), "place_submodules", False))
    with align_module_device(module, device_to_put_offload):
        for name, tensor in named_module_tensors(module, recurse=whole, remove_non_persistent=True):
            full = f"{module_name}.{name}" if module_name else name
            state_dict[full] = tensor.detach().to("cpu").clone()
            if name.endswith("weight") and is_int8_parameter(tensor):
                # A bitsandbytes 8-bit weight keeps its scales beside it (weight.SCB), not as a tensor of
                # the module; its layer's own state dict names them (``SCB``, ``weight_format``).
                layer = module.get_submodule(name.rpartition(".")[0]) if "." in name else module
                for key, value in layer.state_dict().items():
                    state_dict.setdefault(f"{full[: -len('weight')]}{key}", value.detach().to("cpu").clone())
    return state_dict


def get_state_dict_offloaded_model(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full state dict of a model whose blocks may be offloaded (loaded one block at a time, on the CPU)."""
    from accelerate.big_modeling.tensors import _offload_hook, has_offloaded_params

    state: dict[str, torch.Tensor] = {}
    covered: set[str] = set()
    for name, module in model.named_modules():
        if any(name == c or name.startswith(f"{c}.") for c in covered if c) or "" in covered:
            continue
        if has_offloaded_params(module):
            get_state_dict_from_offload(module, name, state)
            if _offload_hook(module).place_submodules:
                covered.add(name)
            continue
        for key, tensor in module.state_dict(keep_vars=False).items():
            if "." in key:
                continue  # submodules report their own tensors
            state.setdefault(f"{name}.{key}" if name else key, tensor.detach().to("cpu"))
    return state
