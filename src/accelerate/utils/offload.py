"""`accelerate.utils.offload`: upstream's path for the offload-folder helpers in ``big_modeling/offload.py``."""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_LAZY: dict[str, str] = dict.fromkeys(
    [
        "OffloadedWeightsLoader",
        "PrefixedDataset",
        "extract_submodules_state_dict",
        "load_offloaded_weight",
        "offload_state_dict",
        "offload_weight",
        "save_offload_index",
    ],
    "accelerate.big_modeling.offload",
)

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
