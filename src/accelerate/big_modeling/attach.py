"""Attaching `AlignDevicesHook`s over a whole model: per module with weights, or per device-map block."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from accelerate.big_modeling.align import AlignDevicesHook
from accelerate.big_modeling.hooks import add_hook_to_module
from accelerate.big_modeling.offload import PrefixedDataset
from accelerate.big_modeling.tensors import DeviceLike, TiedParamsMap, named_module_tensors


def _child_name(parent: str, child: str) -> str:
    return f"{parent}.{child}" if parent else child


def _preloaded(module: nn.Module, preload_module_classes: list[str] | None) -> bool:
    return preload_module_classes is not None and type(module).__name__ in preload_module_classes


def attach_execution_device_hook(
    module: nn.Module,
    execution_device: DeviceLike,
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: TiedParamsMap | None = None,
) -> None:
    """Gives every not-yet-hooked submodule with weights a hook moving its inputs to ``execution_device``.

    Submodules called directly by a parent's custom code (not only via the parent's forward) then
    still receive inputs on their device.
    """
    if not hasattr(module, "_hf_hook") and len(module.state_dict()) > 0:
        hook = AlignDevicesHook(execution_device, skip_keys=skip_keys, tied_params_map=tied_params_map)
        add_hook_to_module(module, hook)
    if _preloaded(module, preload_module_classes):
        return  # the whole module is loaded at once by its own hook
    for child in module.children():
        attach_execution_device_hook(
            child, execution_device, skip_keys=skip_keys, tied_params_map=tied_params_map,
            preload_module_classes=preload_module_classes,
        )  # fmt: skip


def attach_align_device_hook(
    module: nn.Module,
    execution_device: DeviceLike | None = None,
    offload: bool = False,
    weights_map: Mapping[str, Any] | None = None,
    offload_buffers: bool = False,
    module_name: str = "",
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: TiedParamsMap | None = None,
) -> None:
    """Hooks every submodule that holds weights of its own (offloading them with ``offload=True``).

    Args:
        module: the root to walk.
        execution_device: where each forward runs.
        offload: keep weights in ``weights_map`` until each submodule runs.
        weights_map: all weights of ``module`` by dotted name relative to ``module_name``'s root.
        offload_buffers: offload buffers as well.
        module_name: the name of ``module`` inside the model ``weights_map`` belongs to.
        skip_keys: inputs left where they are.
        preload_module_classes: class names whose whole subtree loads at once (for modules that use
            their children's weights directly, outside the children's forward).
        tied_params_map: see :class:`AlignDevicesHook`.
    """
    own = list(named_module_tensors(module))
    whole = offload and _preloaded(module, preload_module_classes)
    if own or whole:
        prefixed = (
            PrefixedDataset(weights_map, f"{module_name}.")
            if weights_map is not None and module_name
            else weights_map
        )
        hook = AlignDevicesHook(
            execution_device=execution_device,
            offload=offload,
            weights_map=prefixed,
            offload_buffers=offload_buffers,
            place_submodules=whole,
            skip_keys=skip_keys,
            tied_params_map=tied_params_map,
        )
        add_hook_to_module(module, hook, append=True)
    if whole:
        return
    for name, child in module.named_children():
        attach_align_device_hook(
            child, execution_device=execution_device, offload=offload, weights_map=weights_map,
            offload_buffers=offload_buffers, module_name=_child_name(module_name, name), skip_keys=skip_keys,
            preload_module_classes=preload_module_classes, tied_params_map=tied_params_map,
        )  # fmt: skip


def attach_align_device_hook_on_blocks(
    module: nn.Module,
    execution_device: DeviceLike | Mapping[str, DeviceLike] | None = None,
    offload: bool | Mapping[str, bool] = False,
    weights_map: Mapping[str, Any] | None = None,
    offload_buffers: bool = False,
    module_name: str = "",
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: TiedParamsMap | None = None,
) -> None:
    """Hooks the blocks of a device map: ``execution_device`` / ``offload`` map block names to values.

    A block that is not offloaded gets one hook placing all its weights on its device; an offloaded
    block gets one hook per submodule with weights (loaded just in time). The model's root hook
    returns outputs on the inputs' device.
    """
    if not isinstance(execution_device, Mapping) and not isinstance(offload, Mapping):
        if offload:
            attach_align_device_hook(
                module, execution_device=execution_device, offload=True, weights_map=weights_map,
                offload_buffers=offload_buffers, module_name=module_name, skip_keys=skip_keys,
                tied_params_map=tied_params_map,
            )  # fmt: skip
        else:
            hook = AlignDevicesHook(
                execution_device, io_same_device=True, skip_keys=skip_keys, place_submodules=True,
                tied_params_map=tied_params_map,
            )  # fmt: skip
            add_hook_to_module(module, hook)
        return
    devices: Mapping[str, Any] = (
        execution_device
        if isinstance(execution_device, Mapping)
        else dict.fromkeys(offload, execution_device)  # type: ignore[arg-type]
    )
    offloads: Mapping[str, bool] = (
        offload if isinstance(offload, Mapping) else dict.fromkeys(devices, offload)
    )
    if module_name in devices and module_name in offloads:
        device = devices[module_name]
        if not offloads[module_name]:
            hook = AlignDevicesHook(
                device, offload_buffers=offload_buffers, io_same_device=module_name == "", place_submodules=True,
                skip_keys=skip_keys, tied_params_map=tied_params_map,
            )  # fmt: skip
            add_hook_to_module(module, hook)
        else:
            attach_align_device_hook(
                module, execution_device=device, offload=True, weights_map=weights_map,
                offload_buffers=offload_buffers, module_name=module_name, skip_keys=skip_keys,
                preload_module_classes=preload_module_classes, tied_params_map=tied_params_map,
            )  # fmt: skip
            if not hasattr(module, "_hf_hook"):
                hook = AlignDevicesHook(
                    device,
                    io_same_device=module_name == "",
                    skip_keys=skip_keys,
                    tied_params_map=tied_params_map,
                )
                add_hook_to_module(module, hook)
        attach_execution_device_hook(
            module, device, skip_keys=skip_keys, preload_module_classes=preload_module_classes,
            tied_params_map=tied_params_map,
        )  # fmt: skip
        return
    if module_name == "":
        hook = AlignDevicesHook(
            devices.get(""), io_same_device=True, skip_keys=skip_keys, tied_params_map=tied_params_map
        )
        add_hook_to_module(module, hook)
    for name, child in module.named_children():
        attach_align_device_hook_on_blocks(
            child, execution_device=devices, offload=offloads, weights_map=weights_map,
            offload_buffers=offload_buffers, module_name=_child_name(module_name, name), skip_keys=skip_keys,
            preload_module_classes=preload_module_classes, tied_params_map=tied_params_map,
        )  # fmt: skip
