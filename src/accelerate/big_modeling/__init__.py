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
    "infer_auto_device_map": "accelerate.big_modeling.device_map",
    # transformers swaps this attribute out to skip the check; dispatch_model looks it up here.
    "check_device_map": "accelerate.big_modeling.device_map",
    "load_checkpoint_in_model": "accelerate.big_modeling.loading",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:
    from accelerate.big_modeling.casting import attach_layerwise_casting_hooks  # noqa: F401
    from accelerate.big_modeling.device_map import check_device_map, infer_auto_device_map  # noqa: F401
    from accelerate.big_modeling.dispatch import (  # noqa: F401
        cpu_offload,
        cpu_offload_with_hook,
        disk_offload,
        dispatch_model,
        load_checkpoint_and_dispatch,
    )
    from accelerate.big_modeling.empty import init_empty_weights, init_on_device  # noqa: F401
    from accelerate.big_modeling.loading import load_checkpoint_in_model  # noqa: F401

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
