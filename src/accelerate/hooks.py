"""`accelerate.hooks`: upstream's module path for the forward hooks; they live in ``big_modeling/``."""

from __future__ import annotations

from accelerate._lazy import lazy_exports

TYPE_CHECKING = False

_LAZY: dict[str, str] = {
    "ModelHook": "accelerate.big_modeling.hooks",
    "SequentialHook": "accelerate.big_modeling.hooks",
    "add_hook_to_module": "accelerate.big_modeling.hooks",
    "remove_hook_from_module": "accelerate.big_modeling.hooks",
    "remove_hook_from_submodules": "accelerate.big_modeling.hooks",
    "AlignDevicesHook": "accelerate.big_modeling.align",
    "attach_align_device_hook": "accelerate.big_modeling.attach",
    "attach_align_device_hook_on_blocks": "accelerate.big_modeling.attach",
    "attach_execution_device_hook": "accelerate.big_modeling.attach",
    "CpuOffload": "accelerate.big_modeling.cpu_offload_hooks",
    "UserCpuOffloadHook": "accelerate.big_modeling.cpu_offload_hooks",
    "LayerwiseCastingHook": "accelerate.big_modeling.casting",
    "attach_layerwise_casting_hooks": "accelerate.big_modeling.casting",
}

__all__ = sorted(_LAZY)

# `name as name` marks each import as a re-export for type checkers, which cannot read the
# computed __all__ above (a user's `mypy --strict` would otherwise reject `from here import name`).
if TYPE_CHECKING:
    from accelerate.big_modeling.align import AlignDevicesHook as AlignDevicesHook
    from accelerate.big_modeling.attach import attach_align_device_hook as attach_align_device_hook
    from accelerate.big_modeling.attach import (
        attach_align_device_hook_on_blocks as attach_align_device_hook_on_blocks,
    )
    from accelerate.big_modeling.attach import attach_execution_device_hook as attach_execution_device_hook
    from accelerate.big_modeling.casting import LayerwiseCastingHook as LayerwiseCastingHook
    from accelerate.big_modeling.casting import (
        attach_layerwise_casting_hooks as attach_layerwise_casting_hooks,
    )
    from accelerate.big_modeling.cpu_offload_hooks import CpuOffload as CpuOffload
    from accelerate.big_modeling.cpu_offload_hooks import UserCpuOffloadHook as UserCpuOffloadHook
    from accelerate.big_modeling.hooks import ModelHook as ModelHook
    from accelerate.big_modeling.hooks import SequentialHook as SequentialHook
    from accelerate.big_modeling.hooks import add_hook_to_module as add_hook_to_module
    from accelerate.big_modeling.hooks import remove_hook_from_module as remove_hook_from_module
    from accelerate.big_modeling.hooks import remove_hook_from_submodules as remove_hook_from_submodules

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
