"""Forward hooks that wrap a module's ``forward``: the mechanism behind offload and device dispatch.

A hook sees the inputs before ``forward`` (``pre_forward``) and the output after it
(``post_forward``), and may change the module when attached (``init_hook``) and detached
(``detach_hook``). ``add_hook_to_module`` keeps the module's own ``forward`` in
``module._old_forward`` so that ``remove_hook_from_module`` can put it back exactly as it was.

Unlike ``nn.Module.register_forward_pre_hook`` these hooks can wrap the call (run it under
``no_grad``, move weights in just before and out right after) and are visible as one object,
``module._hf_hook``, which libraries such as transformers inspect.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

# Set on a module whose ``forward`` was an attribute of the instance (not the class) before a
# hook replaced it, so removal restores that attribute instead of falling back to the class's.
_INSTANCE_FORWARD = "_accelerate_instance_forward"
# Marks the ``to`` / ``cuda`` wrappers dispatch_model puts on a model (see dispatch.guard_moves);
# removing the model's hooks removes them too.
MOVE_GUARD = "_accelerate_move_guard"


class ModelHook:
    """A hook run around a module's forward; subclass it and override what you need.

    Attributes:
        no_grad: run the wrapped ``forward`` under ``torch.no_grad()``.

    Example:
        >>> class Scale(ModelHook):
        ...     def post_forward(self, module, output):
        ...         return output * 2
        >>> add_hook_to_module(nn.Linear(2, 2), Scale())
    """

    no_grad = False

    def init_hook(self, module: nn.Module) -> nn.Module:
        """Called once when the hook is attached; returns the (possibly changed) module."""
        return module

    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Called with the inputs; returns the ``(args, kwargs)`` that ``forward`` receives."""
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        """Called with the output of ``forward``; returns what the caller receives."""
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        """Called when the hook is removed; undoes what ``init_hook`` did to the module."""
        return module


class SequentialHook(ModelHook):
    """Several hooks run one after the other (in the order given, both before and after forward)."""

    def __init__(self, *hooks: ModelHook) -> None:
        self.hooks = list(hooks)

    def init_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.init_hook(module)
        return module

    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        for hook in self.hooks:
            args, kwargs = hook.pre_forward(module, *args, **kwargs)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        for hook in self.hooks:
            output = hook.post_forward(module, output)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.detach_hook(module)
        return module


def _hooked_forward(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    state = vars(module)  # hooks are plain attributes, kept in the instance dict
    hook: ModelHook = state["_hf_hook"]
    args, kwargs = hook.pre_forward(module, *args, **kwargs)
    if hook.no_grad:
        with torch.no_grad():
            output = state["_old_forward"](*args, **kwargs)
    else:
        output = state["_old_forward"](*args, **kwargs)
    return hook.post_forward(module, output)


def add_hook_to_module(module: nn.Module, hook: ModelHook, append: bool = False) -> nn.Module:
    """Wraps ``module.forward`` with ``hook``; returns the module.

    Args:
        module: the module to hook.
        hook: the hook; ``hook.init_hook(module)`` runs now.
        append: keep a hook the module already has and run ``hook`` after it (a
            :class:`SequentialHook`); by default an existing hook is removed first.

    Example:
        >>> model = add_hook_to_module(model, AlignDevicesHook(execution_device="cpu"))
        >>> remove_hook_from_module(model)  # the original forward is back
    """
    existing: ModelHook | None = vars(module).get("_hf_hook")
    if append and existing is not None:
        # The existing hook stays initialised; only the new one is initialised below.
        old_forward = vars(module)["_old_forward"]
        combined = SequentialHook(*(existing.hooks if isinstance(existing, SequentialHook) else [existing]))
        module = hook.init_hook(module)
        combined.hooks.append(hook)
        vars(module).update(_hf_hook=combined, _old_forward=old_forward)
        return module
    if existing is not None:
        remove_hook_from_module(module)
    if "forward" in vars(module):
        setattr(module, _INSTANCE_FORWARD, True)
    original = module.forward
    module = hook.init_hook(module)
    # update_wrapper keeps the name and signature visible (transformers inspects forward's signature).
    wrapped = functools.update_wrapper(functools.partial(_hooked_forward, module), original)
    vars(module).update(_hf_hook=hook, _old_forward=original, forward=wrapped)
    return module


def remove_hook_from_module(module: nn.Module, recurse: bool = False) -> nn.Module:
    """Detaches the hook of ``module`` (and of all its submodules with ``recurse``) and restores forward."""
    state = vars(module)
    hook: ModelHook | None = state.get("_hf_hook")
    if hook is not None:
        hook.detach_hook(module)
        del state["_hf_hook"]
    if "_old_forward" in state:
        original = state.pop("_old_forward")
        if state.pop(_INSTANCE_FORWARD, False):
            state["forward"] = original
        else:
            # The class's forward shows through again once the instance attribute is gone.
            state.pop("forward", None)
    for name in [name for name, value in state.items() if getattr(value, MOVE_GUARD, False)]:
        del state[name]
    if recurse:
        for child in module.children():
            remove_hook_from_module(child, recurse=True)
    return module


def remove_hook_from_submodules(module: nn.Module) -> None:
    """Removes the hooks of ``module`` and of every submodule."""
    remove_hook_from_module(module, recurse=True)
