"""How the processes of ``find_executable_batch_size`` agree after each attempt, and recover.

The decorated function is a training loop: it runs collectives of its own (DDP's gradient
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

import itertools
import json
from dataclasses import asdict, dataclass
from typing import Any

import torch.distributed as dist

from accelerate.diagnostics.watchdog import SLOT

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
    from accelerate.state.process_group import GroupRequest, close_default_group, group_timeout

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
    from accelerate.state.process_group import close_default_group, reopen_default_group

    spec = _CLOSED[0] if _CLOSED[0] is not None else close_default_group()
    _CLOSED[0] = None
    reopen_default_group(spec, prefix=f"{_KEY}/{search}/{attempt}/group")


def describe_failures(outcomes: list[Outcome]) -> str:
    return "; ".join(f"rank {r}: {o.text}" for r, o in enumerate(outcomes) if o.status != "ok")
