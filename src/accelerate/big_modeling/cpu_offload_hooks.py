"""Whole-model CPU offload for pipelines: a model moves to the accelerator when called, back on request.

``cpu_offload_with_hook`` chains models: calling model B first sends model A (B's
``prev_module_hook``) back to the CPU, so a pipeline of models keeps only one on the device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from accelerate.big_modeling.hooks import ModelHook, remove_hook_from_module
from accelerate.big_modeling.tensors import DeviceLike
from accelerate.utils.tree import send_to_device


def default_execution_device() -> torch.device:
    """The first accelerator when there is one, else the CPU."""
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


class CpuOffload(ModelHook):
    """Keeps a model on the CPU until it is called, then moves it (whole) to ``execution_device``.

    Args:
        execution_device: where the model runs (default: the first GPU, else the CPU).
        prev_module_hook: the :class:`UserCpuOffloadHook` of the model run before this one; it is
            offloaded when this model starts.
    """

    def __init__(
        self, execution_device: DeviceLike | None = None, prev_module_hook: UserCpuOffloadHook | None = None
    ) -> None:
        self.prev_module_hook = prev_module_hook
        self.execution_device = (
            execution_device if execution_device is not None else default_execution_device()
        )

    def init_hook(self, module: nn.Module) -> nn.Module:
        return module.to("cpu")

    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if self.prev_module_hook is not None:
            self.prev_module_hook.offload()
            from accelerate.utils.memory import clear_device_cache

            clear_device_cache()
        module.to(self.execution_device)
        return send_to_device(args, self.execution_device), send_to_device(kwargs, self.execution_device)


class UserCpuOffloadHook:
    """The handle ``cpu_offload_with_hook`` returns: ``offload()`` sends the model back to the CPU."""

    def __init__(self, model: nn.Module, hook: ModelHook) -> None:
        self.model = model
        self.hook = hook

    def offload(self) -> None:
        """Moves the model back to the CPU (it returns to the device at its next call)."""
        self.hook.init_hook(self.model)

    def remove(self) -> None:
        """Removes the hook; the model stays where it is."""
        remove_hook_from_module(self.model)
