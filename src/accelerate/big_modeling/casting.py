"""Layerwise casting: store weights in a small dtype (e.g. float8), compute in a wider one.

Each hooked layer is upcast to ``compute_dtype`` just before its forward and cast back to
``storage_dtype`` right after, so only one layer at a time holds wide weights. As upstream, only
linear and convolution layers are cast: normalisation layers, embeddings and other layers keep
their dtype (their weights are small, and precision matters most there).
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from accelerate.big_modeling.hooks import ModelHook, add_hook_to_module
from accelerate.utils.constants import SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING

# The layers upstream casts (subclasses included); every other module is walked into, never cast.
CAST_LAYERS: tuple[type[nn.Module], ...] = SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING


class LayerwiseCastingHook(ModelHook):
    """Casts a module's own weights to ``compute_dtype`` for forward and back to ``storage_dtype`` after."""

    _is_stateful = False

    def __init__(self, storage_dtype: torch.dtype, compute_dtype: torch.dtype, non_blocking: bool) -> None:
        self.storage_dtype = storage_dtype
        self.compute_dtype = compute_dtype
        self.non_blocking = non_blocking

    def init_hook(self, module: nn.Module) -> nn.Module:
        self._cast(module, self.storage_dtype)
        return module

    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        self._cast(module, self.compute_dtype)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        self._cast(module, self.storage_dtype)
        return output

    def _cast(self, module: nn.Module, dtype: torch.dtype) -> None:
        # The whole layer, as upstream's ``module.to(dtype)`` (a subclass may hold submodules); the
        # walk that attaches hooks never goes below a hooked layer, so nothing is cast twice.
        with torch.no_grad():
            for owner in module.modules():
                for param in owner.parameters(recurse=False):
                    if param.is_floating_point():
                        param.data = param.data.to(dtype=dtype, non_blocking=self.non_blocking)
                for name, buffer in owner.named_buffers(recurse=False):
                    if buffer.is_floating_point():
                        owner._buffers[name] = buffer.to(dtype=dtype, non_blocking=self.non_blocking)


def attach_layerwise_casting_hooks(
    module: nn.Module,
    storage_dtype: torch.dtype,
    compute_dtype: torch.dtype,
    skip_modules_pattern: str | tuple[str, ...] | list[str] | None = None,
    skip_modules_classes: tuple[type[nn.Module], ...] | list[type[nn.Module]] | None = None,
    non_blocking: bool = False,
) -> None:
    """Adds a :class:`LayerwiseCastingHook` to every linear and convolution layer of ``module``.

    Other layers (normalisation, embeddings, custom layers holding their own parameters) are left in
    their dtype, as upstream does; the skip arguments leave out casting layers too.

    Args:
        module: the model.
        storage_dtype: dtype the weights are kept in between calls.
        compute_dtype: dtype the weights are cast to for forward.
        skip_modules_pattern: regular expressions; submodules whose name matches one (``re.search``)
            are left alone, with their children.
        skip_modules_classes: submodule classes left alone, with their children.
        non_blocking: asynchronous casts.

    Example:
        >>> attach_layerwise_casting_hooks(model, torch.float8_e4m3fn, torch.bfloat16, skip_modules_pattern=["norm"])
    """
    patterns = (
        [skip_modules_pattern] if isinstance(skip_modules_pattern, str) else list(skip_modules_pattern or [])
    )
    classes = tuple(skip_modules_classes or ())
    _attach_casting(module, "", storage_dtype, compute_dtype, patterns, classes, non_blocking)


def _attach_casting(
    module: nn.Module,
    name: str,
    storage_dtype: torch.dtype,
    compute_dtype: torch.dtype,
    patterns: list[str],
    classes: tuple[type[nn.Module], ...],
    non_blocking: bool,
) -> None:
    if (classes and isinstance(module, classes)) or any(re.search(p, name) for p in patterns):
        return
    if isinstance(module, CAST_LAYERS):
        add_hook_to_module(
            module, LayerwiseCastingHook(storage_dtype, compute_dtype, non_blocking), append=True
        )
        return  # upstream casts the layer whole and does not walk into it
    for child_name, child in module.named_children():
        full = f"{name}.{child_name}" if name else child_name
        _attach_casting(child, full, storage_dtype, compute_dtype, patterns, classes, non_blocking)
