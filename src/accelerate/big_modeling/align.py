"""`AlignDevicesHook`: run a module on one device, with its weights there only while it runs.

With ``offload=True`` the module's weights live in ``weights_map`` (CPU memory, an offload folder,
safetensors files) and the module holds meta placeholders; each forward loads them onto the
execution device first and drops them after, so at most one block's weights are materialised.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from accelerate.big_modeling.hooks import ModelHook
from accelerate.big_modeling.tensors import (
    DeviceLike,
    TiedParamsMap,
    is_int8_parameter,
    named_module_tensors,
    set_module_tensor_to_device,
)
from accelerate.utils.tree import send_to_device


def find_device(data: Any) -> torch.device | None:
    """The device of the first tensor in a nested structure (None without tensors)."""
    if isinstance(data, torch.Tensor):
        return data.device
    if isinstance(data, Mapping):
        data = list(data.values())
    if isinstance(data, list | tuple):
        for item in data:
            device = find_device(item)
            if device is not None:
                return device
    return None


class AlignDevicesHook(ModelHook):
    """Moves inputs (and, when offloading, the module's weights) to ``execution_device`` for forward.

    Args:
        execution_device: where forward runs; ``None`` leaves weights and inputs where they are.
        offload: keep the weights in ``weights_map`` and load them only for the duration of forward.
        io_same_device: return the output on the device the inputs came from.
        weights_map: name -> tensor mapping the offloaded weights are read from (default: a CPU copy
            of the module's weights taken when the hook is attached).
        offload_buffers: offload buffers too (by default they stay on the execution device).
        place_submodules: act on the tensors of all submodules, not only the module's own.
        skip_keys: keyword inputs (or output keys) left where they are.
        tied_params_map: shared across hooks so a tied weight is copied to a device once per forward.
    """

    def __init__(
        self,
        execution_device: DeviceLike | None = None,
        offload: bool = False,
        io_same_device: bool = False,
        weights_map: Mapping[str, torch.Tensor] | None = None,
        offload_buffers: bool = False,
        place_submodules: bool = False,
        skip_keys: str | list[str] | None = None,
        tied_params_map: TiedParamsMap | None = None,
    ) -> None:
        self.execution_device = execution_device
        self.offload = offload
        self.io_same_device = io_same_device
        self.weights_map = weights_map
        self.offload_buffers = offload_buffers
        self.place_submodules = place_submodules
        self.skip_keys = skip_keys
        self.input_device: torch.device | None = None
        self.param_original_devices: dict[str, torch.device] = {}
        self.buffer_original_devices: dict[str, torch.device] = {}
        self.tied_params_map = tied_params_map
        self.tied_pointers_to_remove: set[tuple[int, DeviceLike]] = set()
        self._offload_names: list[str] | None = None
        # name -> (owning module's tensor dict, attribute, its meta tensor): post_forward puts the
        # meta tensor back directly instead of building a new one every forward.
        self._meta_slots: dict[str, tuple[dict[str, Any], str, torch.Tensor]] = {}
        # Offloaded bitsandbytes 8-bit weights: name -> (their layer, the key of their scales in
        # weights_map, or None where the weights map holds them unquantized).
        self._int8: dict[str, tuple[nn.Module, str | None]] | None = None

    def __repr__(self) -> str:
        return (
            f"AlignDevicesHook(execution_device={self.execution_device}, offload={self.offload}, "
            f"io_same_device={self.io_same_device}, offload_buffers={self.offload_buffers}, "
            f"place_submodules={self.place_submodules}, skip_keys={self.skip_keys!r})"
        )

    def _offloaded(self, module: nn.Module) -> list[str]:
        # Computed once: the set of tensors a module holds does not change while it is hooked,
        # and this runs twice per forward of every offloaded module.
        if self._offload_names is None:
            self._offload_names = self._list_offloaded(module)
        return self._offload_names

    def _list_offloaded(self, module: nn.Module) -> list[str]:
        return [
            name
            for name, _ in named_module_tensors(
                module,
                include_buffers=self.offload_buffers,
                recurse=self.place_submodules,
                remove_non_persistent=True,
            )
        ]

    def _int8_weights(self, module: nn.Module) -> dict[str, tuple[nn.Module, str | None]]:
        # Found once per hook, like the names: most modules have none and pay one type check per tensor.
        if self._int8 is None:
            self._int8 = {}
            params = dict(module.named_parameters(recurse=self.place_submodules))
            names = [
                n
                for n in self._offloaded(module)
                if n.endswith("weight") and is_int8_parameter(params.get(n))
            ]
            keys = set(self.weights_map or ()) if names else set()
            for name in names:
                layer = module.get_submodule(name.rpartition(".")[0]) if "." in name else module
                scales = f"{name[: -len('weight')]}SCB"  # how bitsandbytes names them in a state dict
                self._int8[name] = (layer, scales if scales in keys else None)
        return self._int8

    def init_hook(self, module: nn.Module) -> nn.Module:
        # Listed afresh for the module this hook is attached to: a hook can be moved to another module
        # (transformers does so when it resizes embeddings), and the slots point into the old one.
        self._offload_names = None
        self._meta_slots = {}
        self._int8 = None
        if (
            self.execution_device is not None
            and torch.device(_as_device(self.execution_device)).type == "meta"
        ):
            # Nothing runs on meta; the module stays as it is (hooks on skeleton models).
            return module
        if not self.offload and self.execution_device is not None:
            for name, _ in named_module_tensors(module, recurse=self.place_submodules):
                set_module_tensor_to_device(
                    module, name, self.execution_device, tied_params_map=self.tied_params_map
                )
            return module
        if not self.offload:
            return module
        self.original_devices = {
            name: tensor.device
            for name, tensor in named_module_tensors(module, recurse=self.place_submodules)
        }
        if self.weights_map is None:
            self.weights_map = {
                name: tensor.detach().to("cpu")
                for name, tensor in named_module_tensors(
                    module, include_buffers=self.offload_buffers, recurse=self.place_submodules
                )
            }
        for name in self._offloaded(module):
            set_module_tensor_to_device(module, name, "meta")
        if self.execution_device is not None:
            # Buffers that are not offloaded (or cannot be: non-persistent ones) live on the execution device.
            offloaded = set(self._offloaded(module))
            for name, _ in named_module_tensors(module, recurse=self.place_submodules):
                if name not in offloaded:
                    set_module_tensor_to_device(module, name, self.execution_device)
        return module

    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if self.io_same_device:
            self.input_device = find_device([args, kwargs])
        if self.offload:
            if self.weights_map is None:
                raise RuntimeError(
                    f"AlignDevicesHook on {type(module).__name__}: offload=True but no weights_map"
                )
            device = self.execution_device if self.execution_device is not None else "cpu"
            self.tied_pointers_to_remove = set()
            int8 = self._int8_weights(module)
            for name in self._offloaded(module):
                value = self.weights_map[name]
                if self.tied_params_map is not None:
                    pointer = value.data_ptr()
                    if pointer in self.tied_params_map and device not in self.tied_params_map[pointer]:
                        self.tied_pointers_to_remove.add((pointer, device))
                # An 8-bit weight offloaded quantized comes back with its per-row scales.
                scales = int8[name][1] if name in int8 else None
                set_module_tensor_to_device(
                    module,
                    name,
                    device,
                    value=value,
                    tied_params_map=self.tied_params_map,
                    fp16_statistics=None if scales is None else self.weights_map[scales],
                )
        if self.execution_device is None:
            return args, kwargs
        return (
            send_to_device(args, self.execution_device),
            send_to_device(kwargs, self.execution_device, skip_keys=self.skip_keys),
        )

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        if self.offload:
            slots = self._meta_slots
            for name in self._offloaded(module):
                slot = slots.get(name)
                if slot is not None:
                    table, attr, meta = slot
                    table[attr] = meta
                    continue
                set_module_tensor_to_device(module, name, "meta")
                owner = module.get_submodule(name.rpartition(".")[0]) if "." in name else module
                attr = name.rpartition(".")[2]
                table = owner._buffers if attr in owner._buffers else owner._parameters
                slots[name] = (table, attr, table[attr])  # type: ignore[assignment]
            for layer, _ in self._int8_weights(module).values():
                # bitsandbytes moves an 8-bit weight's values and scales onto the layer's state when it
                # runs; dropped here, or the offloaded weight would stay in memory after all.
                state: Any = layer.state
                state.CB = state.SCB = None
            # Drop the copies this hook made for tied weights so their memory is released too.
            if self.tied_params_map is not None:
                for pointer, device in self.tied_pointers_to_remove:
                    self.tied_params_map.get(pointer, {}).pop(device, None)
            self.tied_pointers_to_remove = set()
        if self.io_same_device and self.input_device is not None:
            output = send_to_device(output, self.input_device, skip_keys=self.skip_keys)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        if self.offload and self.weights_map is not None:
            for name, device in getattr(self, "original_devices", {}).items():
                if device.type != "meta":
                    set_module_tensor_to_device(module, name, device, value=self.weights_map.get(name))
        return module


def _as_device(device: DeviceLike) -> str | torch.device:
    return f"cuda:{device}" if isinstance(device, int) else device
