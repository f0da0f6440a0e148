"""Running a model spread over devices: ``dispatch_model`` and the whole-model offload helpers.

``dispatch_model`` gives every block of a device map a hook: blocks on an accelerator run there,
blocks mapped to ``"cpu"`` (with a GPU as execution device) or ``"disk"`` keep their weights
offloaded and load them onto the execution device for their forward only.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accelerate.big_modeling.align import AlignDevicesHook
from accelerate.big_modeling.attach import attach_align_device_hook, attach_align_device_hook_on_blocks
from accelerate.big_modeling.cpu_offload_hooks import CpuOffload, UserCpuOffloadHook
from accelerate.big_modeling.device_map import check_device_same, check_devices_here
from accelerate.big_modeling.hooks import MOVE_GUARD, add_hook_to_module
from accelerate.big_modeling.offload import (
    INDEX_FILE,
    OffloadedWeightsLoader,
    extract_submodules_state_dict,
    offload_state_dict,
)
from accelerate.big_modeling.tensors import DeviceLike, TiedParamsMap, find_tied_parameters, retie_parameters

DeviceMap = Mapping[str, DeviceLike]
logger = logging.getLogger(__name__)


def _first_device(model: nn.Module) -> torch.device:
    first = next(iter(model.parameters()), None)
    if first is None or first.device.type == "meta":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    return first.device


def _has_folder_index(folder: str | os.PathLike[str] | None) -> bool:
    return folder is not None and (Path(folder) / INDEX_FILE).is_file()


def dispatch_model(
    model: nn.Module,
    device_map: DeviceMap,
    main_device: DeviceLike | None = None,
    state_dict: Mapping[str, torch.Tensor] | None = None,
    offload_dir: str | os.PathLike[str] | None = None,
    offload_index: Mapping[str, Any] | None = None,
    offload_buffers: bool = False,
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    force_hooks: bool = False,
) -> nn.Module:
    """Places ``model`` per ``device_map`` and hooks it so forward runs across the devices unchanged.

    Args:
        model: the model (weights loaded, or meta for blocks whose weights are in ``offload_dir`` /
            ``offload_index`` / ``state_dict``).
        device_map: block name -> GPU index, ``"cpu"``, ``"disk"`` or a torch device.
        main_device: where offloaded blocks run and outputs come back to (default: the first
            accelerator in the map, else the CPU).
        state_dict: weights of the CPU-offloaded blocks (default: taken from the model).
        offload_dir: folder of the disk-offloaded weights; written from the model if it has no index.
        offload_index: index of weights already on disk (e.g. pointing into safetensors files).
        offload_buffers: offload buffers of offloaded blocks too.
        skip_keys: keyword inputs that are not moved between devices.
        preload_module_classes: class names whose offloaded weights load all at once with the module.
        force_hooks: add hooks even when the whole model is on one device.

    Example:
        >>> model = dispatch_model(model, {"embed": "cpu", "blocks": "disk", "head": "cpu"}, offload_dir="off")
    """
    # Looked up on the package at call time: transformers replaces it there to skip the check.
    import accelerate.big_modeling as package

    package.check_device_map(model, device_map)
    check_devices_here(device_map, "dispatch_model")  # before anything moves or is hooked
    devices = {str(device) for device in device_map.values()}
    one_device = len(devices) == 1 and "disk" not in devices
    if one_device and not force_hooks:
        device = next(iter(device_map.values()))
        target = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
        tensors = itertools.chain(model.parameters(), model.buffers())
        if not all(check_device_same(t.device, target) for t in tensors):
            model.to(target)  # a model already there (a checkpoint just loaded) skips the module walk
        model.hf_device_map = dict(device_map)  # type: ignore[assignment]
        return model
    if main_device is None:
        accelerators = [d for d in device_map.values() if str(d) not in ("cpu", "disk")]
        main_device = accelerators[0] if accelerators else "cpu"
    # With an accelerator as main device, CPU blocks are offloaded too (loaded onto it per forward).
    offloaded = ("disk",) if str(main_device) in ("cpu", "mps") else ("cpu", "disk")
    cpu_blocks = [name for name, device in device_map.items() if str(device) == "cpu"]
    if state_dict is None and "cpu" in offloaded and cpu_blocks:
        state_dict = extract_submodules_state_dict(model.state_dict(), cpu_blocks)
    disk_blocks = [name for name, device in device_map.items() if str(device) == "disk"]
    if disk_blocks and offload_dir is None and offload_index is None:
        raise ValueError(
            f"dispatch_model: device_map sends {disk_blocks} to 'disk' but neither offload_dir nor offload_index was "
            "given; pass offload_dir='some/folder'"
        )
    if disk_blocks and offload_index is None and not _has_folder_index(offload_dir):
        offload_state_dict(offload_dir, extract_submodules_state_dict(model.state_dict(), disk_blocks))  # type: ignore[arg-type]
    execution = {
        name: (main_device if str(device) in ("cpu", "disk") else device)
        for name, device in device_map.items()
    }
    execution[""] = main_device
    offload = {name: str(device) in offloaded for name, device in device_map.items()}
    weights_map: OffloadedWeightsLoader | None = None
    folder = offload_dir if disk_blocks else None
    if state_dict is not None or folder is not None or offload_index is not None:
        weights_map = OffloadedWeightsLoader(
            state_dict=state_dict,
            save_folder=folder,
            index=offload_index,
            device=main_device if offload_index is not None else None,
        )
    tied = find_tied_parameters(model)
    tied_params_map: TiedParamsMap = {}
    if weights_map is not None:
        for group in tied:
            for name in group:
                if name in weights_map.state_dict:
                    tied_params_map.setdefault(weights_map.state_dict[name].data_ptr(), {})
    attach_align_device_hook_on_blocks(
        model,
        execution_device=execution,
        offload=offload,
        offload_buffers=offload_buffers,
        weights_map=weights_map,
        skip_keys=skip_keys,
        preload_module_classes=preload_module_classes,
        tied_params_map=tied_params_map,
    )
    # Placing blocks may have given tied names separate parameters; point them at one again where
    # they live together (offloaded ones are reloaded per forward anyway).
    retie_parameters(model, [group for group in tied if _same_device(group, device_map)])
    guard_moves(model)
    model.hf_device_map = dict(device_map)  # type: ignore[assignment]
    return model


def guard_moves(model: nn.Module) -> None:
    """Wraps ``model.to`` / ``model.cuda``: moving a dispatched model warns, and is refused while
    blocks are offloaded (their weights are meta placeholders filled by the hooks, as upstream)."""
    for attr in ("to", "cuda"):
        original = getattr(model, attr)
        if getattr(original, MOVE_GUARD, False):
            original = original.__wrapped__  # dispatched again: one guard is enough
        vars(model)[attr] = _guarded(model, attr, original)


def _guarded(model: nn.Module, attr: str, original: Any) -> Any:
    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if attr != "to" or torch._C._nn._parse_to(*args, **kwargs)[0] is not None:
            logger.warning(
                "Moving a model dispatched by a device map: its hooks still load each block onto the "
                "execution device the map chose, so the move may not place what you expect."
            )
        offloaded = sorted({name.rpartition(".")[0] for name, p in model.named_parameters() if p.is_meta})
        if offloaded:
            raise RuntimeError(
                f"Cannot move or cast this model: some of its blocks are offloaded to the CPU or disk ({_list(offloaded)}); "
                "dispatch it again with another device_map instead, or load the checkpoint into a model that is "
                "not dispatched"
            )
        return original(*args, **kwargs)

    setattr(guarded, MOVE_GUARD, True)
    return guarded


def _list(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" ... ({len(names)} in all)" if len(names) > 5 else "")


def _same_device(group: list[str], device_map: DeviceMap) -> bool:
    from accelerate.big_modeling.device_map import device_of

    return len({str(device_of(name, device_map)) for name in group}) == 1


def load_checkpoint_and_dispatch(
    model: nn.Module,
    checkpoint: str | os.PathLike[str],
    device_map: str | DeviceMap | None = None,
    max_memory: Mapping[Any, int | str] | None = None,
    no_split_module_classes: list[str] | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
    offload_buffers: bool = False,
    dtype: str | torch.dtype | None = None,
    offload_state_dict: bool | None = None,
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    force_hooks: bool = False,
    strict: bool = False,
    full_state_dict: bool = True,
    broadcast_from_rank0: bool = False,
) -> nn.Module:
    """Loads a checkpoint into ``model`` (usually built with ``init_empty_weights``) and dispatches it.

    Args:
        model: the model to fill.
        checkpoint: a weights file, a ``*.index.json`` of shards, or a folder holding either.
        device_map: a dict, or ``"auto"`` / ``"balanced"`` (spread evenly over the GPUs),
            ``"balanced_low_0"`` (leave GPU 0 as free as possible), ``"sequential"`` (fill GPUs in
            order), then the CPU, then the disk; ``None`` loads without dispatching.
        max_memory: budgets per device for the string modes (see ``infer_auto_device_map``).
        no_split_module_classes: class names never split across devices.
        offload_folder: where disk-offloaded weights are written.
        offload_buffers: offload buffers of offloaded blocks too.
        dtype: floating weights are loaded in this dtype.
        offload_state_dict: park CPU weights on disk while loading (default: when the map uses the disk).
        skip_keys, preload_module_classes, force_hooks: passed to :func:`dispatch_model`.
        strict: raise on missing or unexpected weights.
        full_state_dict, broadcast_from_rank0: passed to :func:`load_checkpoint_in_model`.

    Example:
        >>> with init_empty_weights():
        ...     model = MyModel()
        >>> model = load_checkpoint_and_dispatch(model, "ckpt/", device_map="auto", offload_folder="off",
        ...                                      max_memory={"cpu": "2GB", "disk": "100GB"})
    """
    from accelerate.big_modeling.budgets import get_balanced_memory
    from accelerate.big_modeling.loading import load_checkpoint_in_model
    from accelerate.big_modeling.planner import infer_auto_device_map

    modes = ("auto", "balanced", "balanced_low_0", "sequential")
    if isinstance(device_map, str):
        if device_map not in modes:
            raise ValueError(f"device_map={device_map!r} is not supported: use a dict or one of {modes}")
        if device_map != "sequential":
            max_memory = get_balanced_memory(
                model,
                max_memory=max_memory,
                no_split_module_classes=no_split_module_classes,
                dtype=dtype,
                low_zero=device_map == "balanced_low_0",
            )
        device_map = infer_auto_device_map(
            model,
            max_memory=max_memory,
            no_split_module_classes=no_split_module_classes,
            dtype=dtype,
            offload_buffers=offload_buffers,
        )
    if (
        offload_state_dict is None
        and device_map is not None
        and "disk" in {str(d) for d in device_map.values()}
    ):
        offload_state_dict = True
    load_checkpoint_in_model(
        model,
        checkpoint,
        device_map=device_map,
        offload_folder=offload_folder,
        dtype=dtype,
        offload_state_dict=bool(offload_state_dict),
        offload_buffers=offload_buffers,
        strict=strict,
        full_state_dict=full_state_dict,
        broadcast_from_rank0=broadcast_from_rank0,
    )
    if device_map is None:
        return model
    return dispatch_model(
        model,
        device_map=device_map,
        offload_dir=offload_folder,
        offload_buffers=offload_buffers,
        skip_keys=skip_keys,
        preload_module_classes=preload_module_classes,
        force_hooks=force_hooks,
    )


def _offload_all(
    model: nn.Module,
    weights_map: Mapping[str, Any],
    execution_device: DeviceLike | None,
    offload_buffers: bool,
    preload_module_classes: list[str] | None,
) -> nn.Module:
    """Hooks ``model`` to read every weight from ``weights_map`` just in time (cpu_offload, disk_offload)."""
    device = execution_device if execution_device is not None else _first_device(model)
    # The root hook returns outputs on the inputs' device.
    add_hook_to_module(model, AlignDevicesHook(io_same_device=True), append=True)
    attach_align_device_hook(
        model,
        execution_device=device,
        offload=True,
        offload_buffers=offload_buffers,
        weights_map=weights_map,
        preload_module_classes=preload_module_classes,
    )
    return model


def cpu_offload(
    model: nn.Module,
    execution_device: DeviceLike | None = None,
    offload_buffers: bool = False,
    state_dict: Mapping[str, torch.Tensor] | None = None,
    preload_module_classes: list[str] | None = None,
) -> nn.Module:
    """Keeps all weights on the CPU; each submodule's weights go to ``execution_device`` for its forward only.

    Example:
        >>> model = cpu_offload(model, execution_device="cuda:0")
    """
    if state_dict is None:
        state_dict = {name: tensor.to("cpu") for name, tensor in model.state_dict().items()}
    return _offload_all(model, state_dict, execution_device, offload_buffers, preload_module_classes)


def disk_offload(
    model: nn.Module,
    offload_dir: str | os.PathLike[str],
    execution_device: DeviceLike | None = None,
    offload_buffers: bool = False,
    preload_module_classes: list[str] | None = None,
) -> nn.Module:
    """Writes the weights to ``offload_dir`` (unless it already holds them) and reads each from there for forward.

    Example:
        >>> model = disk_offload(model, "offload/", execution_device="cpu")
    """
    if not _has_folder_index(offload_dir):
        offload_state_dict(offload_dir, model.state_dict())
    weights_map = OffloadedWeightsLoader(save_folder=offload_dir)
    return _offload_all(model, weights_map, execution_device, offload_buffers, preload_module_classes)


def cpu_offload_with_hook(
    model: nn.Module,
    execution_device: DeviceLike | None = None,
    prev_module_hook: UserCpuOffloadHook | None = None,
) -> tuple[nn.Module, UserCpuOffloadHook]:
    """Moves the whole model to ``execution_device`` when called; ``hook.offload()`` sends it back.

    Pass the previous model's hook as ``prev_module_hook`` to chain a pipeline: calling this model
    first offloads the previous one, so one model at a time sits on the device.

    Example:
        >>> encoder, hook1 = cpu_offload_with_hook(encoder, "cuda:0")
        >>> decoder, hook2 = cpu_offload_with_hook(decoder, "cuda:0", prev_module_hook=hook1)
        >>> decoder(encoder(x))  # encoder moves back to the CPU when decoder starts
        >>> hook2.offload()
    """
    hook = CpuOffload(execution_device=execution_device, prev_module_hook=prev_module_hook)
    add_hook_to_module(model, hook, append=True)
    return model, UserCpuOffloadHook(model, hook)
