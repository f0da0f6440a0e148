"""Memory helpers: freeing references and retrying with smaller batches on out-of-memory."""

from __future__ import annotations

import functools
import gc
import inspect
import itertools
import logging
import traceback
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


def _default_reduction(batch_size: int) -> int:
    # Upstream's rule since it stopped halving: 10% smaller each time (128 -> 115 -> 103 -> ...).
    return int(batch_size * 0.9)


def _reducer(reduce_batch_size_fn: Callable[..., int] | None) -> Callable[[int], int]:
    """``fn(batch_size) -> int``; upstream's form ``fn() -> int`` (it keeps its own count) also works."""
    if reduce_batch_size_fn is None:
        return _default_reduction
    fn = reduce_batch_size_fn
    try:
        takes_size = any(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
            for p in inspect.signature(fn).parameters.values()
        )
    except (TypeError, ValueError):  # no signature to read (some builtins): pass the size
        takes_size = True
    return fn if takes_size else (lambda _size: fn())


def find_executable_batch_size(
    function: Callable[..., Any] | None = None,
    starting_batch_size: int = 128,
    reduce_batch_size_fn: Callable[..., int] | None = None,
) -> Any:
    """Decorator: calls ``function(batch_size, ...)``, with a smaller batch after each out-of-memory error.

    The next size is ``int(batch_size * 0.9)`` (as upstream), or ``reduce_batch_size_fn(batch_size)``
    (upstream's ``reduce_batch_size_fn()`` without an argument works too). At zero it raises
    ``RuntimeError("No executable batch size found, reached zero.")``.

    In several processes every process must call the decorated function. After each attempt they
    agree, through the process group's store, on how it went: an out-of-memory error on any process
    makes all of them retry with the same smaller size, and an other error on any process is raised
    on all of them, naming the process. ``function`` may run collectives (a DDP step,
    ``accelerator.gather``) and run out of memory on one process while the others already wait in
    one: the failed process closes the process group, which ends the others' wait, and every
    process then creates the group again (see :mod:`accelerate.utils.batch_search`); prepare the
    model and the data inside ``function``. The agreement needs the process group to exist when an
    attempt ends (create the ``Accelerator`` before the search); without one each process decides
    for itself.

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
    reduce = _reducer(reduce_batch_size_fn)

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from accelerate.utils import batch_search

        batch_size = starting_batch_size
        params = list(inspect.signature(function).parameters)
        if len(params) < len(args) + 1:
            raise TypeError(
                f"{function.__name__} takes batch_size as its first argument, filled in by find_executable_batch_size; "
                f"call it without that argument (got {len(args)} positional arguments)."
            )
        search = batch_search.new_search()
        for attempt in itertools.count():
            if batch_size <= 0:  # a custom reduction may step past 0
                raise RuntimeError(
                    "No executable batch size found, reached zero. "
                    f"({function.__name__} ran out of memory at every batch size tried, from {starting_batch_size}.)"
                )
            result, error, outcome = None, None, batch_search.Outcome(batch_size, "ok")
            try:
                result = function(batch_size, *args, **kwargs)
            except Exception as exc:
                # Keep only the text of an out-of-memory error, and no frame locals of another: the
                # frames hold the tensors that filled memory, and the model that holds the group.
                text = f"{type(exc).__name__}: {exc}".splitlines()[0]
                if should_reduce_batch_size(exc):
                    outcome = batch_search.Outcome(batch_size, "oom", text)
                else:
                    traceback.clear_frames(exc.__traceback__)
                    error, outcome = exc, batch_search.Outcome(batch_size, "error", text)
                del exc
            if _agree_on_attempt(function.__name__, search, attempt, outcome, error):
                return result
            result = None
            clear_device_cache(garbage_collection=True)
            batch_size = reduce(batch_size)
        raise AssertionError("unreachable")  # itertools.count() never ends

    return wrapper


def _agree_on_attempt(
    name: str, search: int, attempt: int, outcome: Any, error: BaseException | None
) -> bool:
    """True when every process succeeded; False when any ran out of memory (all retry smaller).

    Raises (on every process) when a process failed otherwise, or when the processes tried
    different sizes. In a single process, or without a process group, this is the local outcome.
    """
    from accelerate.utils import batch_search

    what = f"find_executable_batch_size: {name}(batch_size={outcome.batch_size})"
    if batch_search.group_is_up() and torch.distributed.get_world_size() > 1:
        outcomes = batch_search.exchange(search, attempt, outcome, what)
    else:
        # No process group (yet, or any more: the function may create and end its own): nobody to
        # agree with, so the local outcome decides, as in a single process.
        if error is not None:
            raise error
        outcomes = [outcome]
    failed = [o for o in outcomes if o.status != "ok"]
    if failed and len(outcomes) > 1:
        # The group may be closed on some ranks and open on others: recreate it everywhere, so the
        # next attempt (or the code that handles the error below) finds one group in one state.
        batch_search.recover_group(search, attempt)
    sizes = [o.batch_size for o in outcomes]
    if len(set(sizes)) > 1:
        tried = ", ".join(f"rank {rank}: {size}" for rank, size in enumerate(sizes))
        raise RuntimeError(
            f"find_executable_batch_size: the processes tried different batch sizes ({tried}); every "
            "process must call the decorated function with the same starting_batch_size and "
            "reduce_batch_size_fn."
        )
    if not failed:
        return True
    if not any(o.status == "oom" for o in failed):
        ranks = ", ".join(str(r) for r, o in enumerate(outcomes) if o.status != "ok")
        noun = "rank" if len(failed) == 1 else "ranks"
        raise RuntimeError(
            f"{what} failed on {noun} {ranks} ({batch_search.describe_failures(outcomes)})"
        ) from error
    # An out-of-memory error anywhere decides: the other ranks' errors are, as a rule, its
    # consequence (a collective whose peer left); if one is not, the smaller size shows it again.
    where = batch_search.describe_failures(outcomes) if len(outcomes) > 1 else failed[0].text
    logger.info("%s ran out of memory (%s); every process retries with a smaller batch", what, where)
    return False
