"""``find_executable_batch_size``: retry with a smaller batch after out-of-memory, on every process.

In one process the decorator simply retries. In several, the processes agree after each attempt on
how it went, and recover the process group, which is why this lives beside the group's lifecycle
(:mod:`accelerate.state.process_group`) rather than with the generic memory helpers it uses
(:mod:`accelerate.utils.memory`, which re-exports the decorator at upstream's path). The decorated function is a training loop: it runs collectives of its own (DDP's gradient
all-reduce, ``accelerator.gather``). When one rank runs out of memory, the others may already wait
in such a collective, which will never complete. Two rules keep that from aborting or hanging:

- The agreement goes through the process group's key-value store, never through a collective of
  the group the function uses: a rank that reports while a peer waits in a collective cannot be
  mistaken for that collective (gloo aborted the job: "Received data size doesn't match").
- A rank whose attempt failed closes the default group before it reports
  (:func:`~accelerate.state.process_group.close_default_group`): a peer blocked in a collective
  then fails at once ("Connection closed by peer") and reports too. Once all have reported, any
  failure means every rank closes what is left of the group and all create it again, under a
  fresh store prefix, so the next attempt (or the code after an error) starts from one group in the
  same state everywhere.

Objects prepared *before* the search (a DDP model outside the decorated function) keep the
replaced group and cannot communicate after a failed attempt; prepare them inside the function,
as after ``accelerator.free_memory()``.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import logging
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch.distributed as dist

from accelerate.diagnostics.watchdog import SLOT
from accelerate.state.process_group import (
    GroupRequest,
    close_default_group,
    group_timeout,
    reopen_default_group,
)
from accelerate.utils.memory import clear_device_cache, should_reduce_batch_size

# The logger of the module that held the decorator before, so users' logging settings keep applying.
logger = logging.getLogger("accelerate.utils.memory")

_KEY = "accelerate/batch_search"
# Searches happen in the same order on every rank (each calls the decorated function), so the n-th
# search has the same number everywhere; with the attempt number it names the store keys.
_SEARCHES = itertools.count()


@dataclass(frozen=True)
class Outcome:
    """One rank's attempt: the size it tried, and ``"ok"``, ``"oom"`` or ``"error"`` with the text."""

    batch_size: int
    status: str
    text: str = ""


def group_is_up() -> bool:
    return dist.is_available() and dist.is_initialized()


def new_search() -> int:
    return next(_SEARCHES)


def exchange(search: int, attempt: int, outcome: Outcome, what: str) -> list[Outcome]:
    """Publishes this rank's ``outcome`` and returns every rank's, in rank order.

    A failed rank closes the default group first, so that peers blocked in one of the function's
    collectives fail now rather than at the group's timeout. Waits at most the group's timeout.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    timeout = group_timeout(GroupRequest())
    store = dist.distributed_c10d._get_default_store()
    if outcome.status != "ok":
        _CLOSED[0] = close_default_group()
    prefix = f"{_KEY}/{search}/{attempt}"
    keys = [f"{prefix}/{r}" for r in range(world)]
    with SLOT.enter(f"find_executable_batch_size agreement ({what})"):
        store.set(keys[rank], json.dumps(asdict(outcome)))
        try:
            store.wait(keys, timeout)
        except Exception as exc:  # noqa: BLE001 - the store's timeout error type varies across torch versions
            missing = [str(r) for r, key in enumerate(keys) if not store.check([key])]
            raise RuntimeError(
                f"{what}: rank(s) {', '.join(missing) or '?'} did not report how their attempt went within "
                f"{timeout} (the process group's timeout); they are still running or have died."
            ) from exc
        return [Outcome(**json.loads(store.get(key))) for key in keys]


# The spec of the group this rank closed after its failed attempt (one slot: set, then used once).
_CLOSED: list[Any] = [None]


def recover_group(search: int, attempt: int) -> None:
    """After a failed attempt on any rank: every rank closes the group (if still open) and reopens it."""
    spec = _CLOSED[0] if _CLOSED[0] is not None else close_default_group()
    _CLOSED[0] = None
    reopen_default_group(spec, prefix=f"{_KEY}/{search}/{attempt}/group")


def describe_failures(outcomes: list[Outcome]) -> str:
    return "; ".join(f"rank {r}: {o.text}" for r, o in enumerate(outcomes) if o.status != "ok")


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
    ``RuntimeError("No executable batch size found, reached zero.")``. The size reached is kept for
    the next call of the decorated function, as upstream (a second ``train()`` starts from it).

    In several processes every process must call the decorated function. After each attempt they
    agree, through the process group's store, on how it went: an out-of-memory error on any process
    makes all of them retry with the same smaller size, and an other error on any process is raised
    on all of them, naming the process. ``function`` may run collectives (a DDP step,
    ``accelerator.gather``) and run out of memory on one process while the others already wait in
    one: the failed process closes the process group, which ends the others' wait, and every
    process then creates the group again (see this module's docstring); prepare the
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
    # As upstream, the size found is kept: the next call of the decorated function starts from it.
    current = [starting_batch_size]

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        batch_size = current[0]
        params = list(inspect.signature(function).parameters)
        if len(params) < len(args) + 1:
            raise TypeError(
                f"{function.__name__} takes batch_size as its first argument, filled in by find_executable_batch_size; "
                f"call it without that argument (got {len(args)} positional arguments)."
            )
        search = new_search()
        for attempt in itertools.count():
            if batch_size <= 0:  # a custom reduction may step past 0
                raise RuntimeError(
                    "No executable batch size found, reached zero. "
                    f"({function.__name__} ran out of memory at every batch size tried, from {starting_batch_size}.)"
                )
            result, error, outcome = None, None, Outcome(batch_size, "ok")
            try:
                result = function(batch_size, *args, **kwargs)
            except Exception as exc:
                # Keep only the text of an out-of-memory error, and no frame locals of another: the
                # frames hold the tensors that filled memory, and the model that holds the group.
                text = f"{type(exc).__name__}: {exc}".splitlines()[0]
                if should_reduce_batch_size(exc):
                    outcome = Outcome(batch_size, "oom", text)
                else:
                    traceback.clear_frames(exc.__traceback__)
                    error, outcome = exc, Outcome(batch_size, "error", text)
                del exc
            if _agree_on_attempt(function.__name__, search, attempt, outcome, error):
                return result
            result = None
            clear_device_cache(garbage_collection=True)
            batch_size = current[0] = reduce(batch_size)
        raise AssertionError("unreachable")  # itertools.count() never ends

    return wrapper


def _agree_on_attempt(
    name: str, search: int, attempt: int, outcome: Outcome, error: BaseException | None
) -> bool:
    """True when every process succeeded; False when any ran out of memory (all retry smaller).

    Raises (on every process) when a process failed otherwise, or when the processes tried
    different sizes. In a single process, or without a process group, this is the local outcome.
    """
    what = f"find_executable_batch_size: {name}(batch_size={outcome.batch_size})"
    if group_is_up() and dist.get_world_size() > 1:
        outcomes = exchange(search, attempt, outcome, what)
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
        recover_group(search, attempt)
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
        raise RuntimeError(f"{what} failed on {noun} {ranks} ({describe_failures(outcomes)})") from error
    # An out-of-memory error anywhere decides: the other ranks' errors are, as a rule, its
    # consequence (a collective whose peer left); if one is not, the smaller size shows it again.
    where = describe_failures(outcomes) if len(outcomes) > 1 else failed[0].text
    logger.info("%s ran out of memory (%s); every process retries with a smaller batch", what, where)
    return False
