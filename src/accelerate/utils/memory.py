"""Memory helpers: freeing references, emptying the device cache, recognising out-of-memory errors.

``find_executable_batch_size`` (upstream's path is this module) retries smaller after out-of-memory
on every process at once, so it needs the process group: it lives in
:mod:`accelerate.state.batch_search` and loads from there on first use.
"""

from __future__ import annotations

import gc
from typing import Any

import torch

from accelerate._lazy import lazy_exports


def clear_device_cache(garbage_collection: bool = False) -> None:
    if garbage_collection:
        gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def release_memory(*objects: Any) -> list[None]:
    """Drops the given references and empties the device cache; use as ``a, b = release_memory(a, b)``."""
    objects_list = [None for _ in objects]
    clear_device_cache(garbage_collection=True)
    return objects_list


# Messages of out-of-memory errors that arrive as a plain RuntimeError (one argument).
_OOM_MARKERS = (
    "CUDA out of memory.",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
    "DefaultCPUAllocator: can't allocate memory",
    # The CPU allocator's own check; its wording after the marker varies ("not enough memory", ...).
    "[enforce fail at alloc_cpu.cpp",
    "out of memory",
)


def should_reduce_batch_size(exception: BaseException) -> bool:
    """True for out-of-memory errors (CUDA, XPU, MPS, the CPU allocator, Python's MemoryError)."""
    if isinstance(exception, torch.OutOfMemoryError | MemoryError):
        return True
    if isinstance(exception, RuntimeError) and len(exception.args) == 1:
        message = str(exception.args[0])
        return any(marker in message for marker in _OOM_MARKERS)
    return False


_LAZY: dict[str, str] = {"find_executable_batch_size": "accelerate.state.batch_search"}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
