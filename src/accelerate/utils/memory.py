"""Memory helpers: freeing references and retrying with smaller batches on out-of-memory."""

from __future__ import annotations

import functools
import gc
import inspect
import logging
from collections.abc import Callable
from typing import Any

import torch

logger = logging.getLogger(__name__)


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


def find_executable_batch_size(
    function: Callable[..., Any] | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[[int], int] | None = None,
) -> Any:
    """Decorator: calls ``function(batch_size, ...)``, halving the batch size after each out-of-memory error.

    In several processes every process must call the decorated function; after each attempt they
    agree (one small collective) on how it went, so an out-of-memory error on any process makes all
    of them retry with the same smaller size, and an other error on any process is raised on all of
    them. ``function`` itself must not run out of memory on one process in the middle of a
    collective the others then wait in (that is a hang until the process group's timeout). The
    agreement needs the process group to exist when an attempt ends (create the ``Accelerator``
    before the search); without one each process decides for itself.

    Example:
        >>> @find_executable_batch_size(starting_batch_size=64)
        ... def train(batch_size): ...
        >>> train()
    """
    if function is None:
        return functools.partial(
            find_executable_batch_size,
            starting_batch_size=starting_batch_size,
            reduce_batch_size_fn=reduce_batch_size_fn,
        )
    reduce = reduce_batch_size_fn or (lambda size: size // 2)

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        batch_size = starting_batch_size
        params = list(inspect.signature(function).parameters)
        if len(params) < len(args) + 1:
            raise TypeError(
                f"{function.__name__} takes batch_size as its first argument, filled in by find_executable_batch_size; "
                f"call it without that argument (got {len(args)} positional arguments)."
            )
        while True:
            if batch_size <= 0:  # a custom reduction may step past 0
                raise RuntimeError("find_executable_batch_size: no batch size down to 1 fits in memory.")
            result, error, out_of_memory = None, None, None
            try:
                result = function(batch_size, *args, **kwargs)
            except Exception as exc:
                if should_reduce_batch_size(exc):
                    # Keep only the text: the exception's frames hold the tensors that filled memory.
                    out_of_memory = f"{type(exc).__name__}: {exc}".splitlines()[0]
                else:
                    error = exc
            if _agree_on_attempt(function.__name__, batch_size, error, out_of_memory):
                return result
            result = None
            clear_device_cache(garbage_collection=True)
            batch_size = reduce(batch_size)

    return wrapper


def _agree_on_attempt(
    name: str, batch_size: int, error: BaseException | None, out_of_memory: str | None
) -> bool:
    """True when every process succeeded with ``batch_size``; False when any ran out of memory.

    Raises (on every process) when any process failed otherwise, or when the processes tried
    different sizes. In a single process this is the plain local outcome.
    """
    import torch.distributed as dist

    from accelerate.utils.agreement import agree_on_failure

    what = f"find_executable_batch_size: {name}(batch_size={batch_size})"
    if dist.is_available() and dist.is_initialized():
        outcomes = agree_on_failure(error, what=what, payload=(batch_size, out_of_memory))
    else:
        # No process group (yet, or any more: the function may create and end its own): nobody to
        # agree with, so the local outcome decides, as in a single process.
        if error is not None:
            raise error
        outcomes = [(batch_size, out_of_memory)]
    sizes = [size for size, _ in outcomes]
    if len(set(sizes)) > 1:
        tried = ", ".join(f"rank {rank}: {size}" for rank, size in enumerate(sizes))
        raise RuntimeError(
            f"find_executable_batch_size: the processes tried different batch sizes ({tried}); every "
            "process must call the decorated function with the same starting_batch_size and "
            "reduce_batch_size_fn."
        )
    failed = {rank: text for rank, (_, text) in enumerate(outcomes) if text is not None}
    if not failed:
        return True
    ranks = ", ".join(f"rank {rank} ({text})" for rank, text in failed.items())
    where = f" on {ranks}" if len(outcomes) > 1 else f": {failed[0]}"
    logger.info("%s ran out of memory%s; every process retries with a smaller batch", what, where)
    return False
