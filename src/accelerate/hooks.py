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

if TYPE_CHECKING:
    from accelerate.big_modeling.align import AlignDevicesHook  # noqa: F401
    from accelerate.big_modeling.attach import (  # noqa: F401
        attach_align_device_hook,
        attach_align_device_hook_on_blocks,
        attach_execution_device_hook,
    )
    from accelerate.big_modeling.casting import LayerwiseCastingHook, attach_layerwise_casting_hooks  # noqa: F401
    from accelerate.big_modeling.cpu_offload_hooks import CpuOffload, UserCpuOffloadHook  # noqa: F401
    from accelerate.big_modeling.hooks import (  # noqa: F401
        ModelHook,
        SequentialHook,
        add_hook_to_module,
        remove_hook_from_module,
        remove_hook_from_submodules,
    )

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
