"""Big-model inference: build models without memory, place them across devices, offload, dispatch.

Modules, one job each: ``empty`` (init_empty_weights), ``hooks`` / ``align`` / ``attach`` /
``cpu_offload_hooks`` / ``casting`` (forward hooks), ``tensors`` (moving one tensor, ties),
``sizes`` and ``budgets`` (bytes per block and per device), ``device_map`` (inferring and checking
maps), ``offload`` and ``streaming`` (weights on disk), ``loading`` (checkpoints into models),
``dispatch`` (running a placed model). Names load on first use.
"""

from __future__ import annotations

from accelerate._lazy import lazy_exports

TYPE_CHECKING = False

_LAZY: dict[str, str] = {
    "init_empty_weights": "accelerate.big_modeling.empty",
    "init_on_device": "accelerate.big_modeling.empty",
    "dispatch_model": "accelerate.big_modeling.dispatch",
    "load_checkpoint_and_dispatch": "accelerate.big_modeling.dispatch",
    "cpu_offload": "accelerate.big_modeling.dispatch",
    "cpu_offload_with_hook": "accelerate.big_modeling.dispatch",
    "disk_offload": "accelerate.big_modeling.dispatch",
    "attach_layerwise_casting_hooks": "accelerate.big_modeling.casting",
    "infer_auto_device_map": "accelerate.big_modeling.planner",
    # transformers swaps this attribute out to skip the check; dispatch_model looks it up here.
    "check_device_map": "accelerate.big_modeling.device_map",
    "load_checkpoint_in_model": "accelerate.big_modeling.loading",
}

__all__ = sorted(_LAZY)

# `name as name` marks each import as a re-export for type checkers, which cannot read the
# computed __all__ above (a user's `mypy --strict` would otherwise reject `from here import name`).
if TYPE_CHECKING:
    from accelerate.big_modeling.casting import (
        attach_layerwise_casting_hooks as attach_layerwise_casting_hooks,
    )
    from accelerate.big_modeling.device_map import check_device_map as check_device_map
    from accelerate.big_modeling.dispatch import cpu_offload as cpu_offload
    from accelerate.big_modeling.dispatch import cpu_offload_with_hook as cpu_offload_with_hook
    from accelerate.big_modeling.dispatch import disk_offload as disk_offload
    from accelerate.big_modeling.dispatch import dispatch_model as dispatch_model
    from accelerate.big_modeling.dispatch import load_checkpoint_and_dispatch as load_checkpoint_and_dispatch
    from accelerate.big_modeling.empty import init_empty_weights as init_empty_weights
    from accelerate.big_modeling.empty import init_on_device as init_on_device
    from accelerate.big_modeling.loading import load_checkpoint_in_model as load_checkpoint_in_model
    from accelerate.big_modeling.planner import infer_auto_device_map as infer_auto_device_map

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
