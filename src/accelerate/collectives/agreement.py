"""Agreeing on a failure across processes: one rank's exception is raised on every rank.

A rank that fails and simply raises leaves the others waiting forever in their next collective.
Instead every rank calls :func:`agree_on_failure` at the same point with its local exception (or
None): one all-gather tells everyone who failed and why, and every rank raises the same
message, so no process hangs and every log names the culprit. The call doubles as the exchange of
a small per-rank payload (file records, a batch header) when nothing failed, so the agreement costs
no extra collective.
"""

from __future__ import annotations

import pickle
from typing import Any

import torch

from accelerate.collectives.communicator import Communicator, current_communicator
from accelerate.diagnostics.watchdog import SLOT

# A payload that pickles to at most this many bytes (the file records of a checkpoint, as a rule)
# travels in one fixed-size all-gather; torch's all_gather_object spends a collective on the sizes
# first, every time.
_SLOT = 16 * 1024
_HEADER = 8  # the pickle's length, or -1 when it did not fit


def _gather_objects(communicator: Communicator, obj: Any) -> list[Any]:
    """Every rank's ``obj``: one all-gather when all fit in a slot, otherwise ``all_gather_objects``."""
    if type(communicator).all_gather_objects is not Communicator.all_gather_objects:
        return communicator.all_gather_objects(obj)  # a backend with its own exchange (XLA)
    data = pickle.dumps(obj)
    fits = len(data) <= _SLOT
    slot = torch.zeros(1, _HEADER + _SLOT, dtype=torch.uint8)
    slot[0, :_HEADER] = torch.tensor([len(data) if fits else -1], dtype=torch.int64).view(torch.uint8)
    if fits and data:
        slot[0, _HEADER : _HEADER + len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    gathered = communicator.all_gather(slot.to(communicator.device)).cpu()
    sizes = gathered[:, :_HEADER].contiguous().view(torch.int64).flatten().tolist()
    if min(sizes) < 0:  # the same sizes on every rank, so every rank takes this path
        return communicator.all_gather_objects(obj)
    return [
        pickle.loads(gathered[rank, _HEADER : _HEADER + size].numpy().tobytes())  # noqa: S301 - our own processes' data, as all_gather_object
        for rank, size in enumerate(sizes)
    ]


def _slot_name(what: str) -> str:
    """How a hang report names the agreement: ``agreement after save_state to run/ckpt``."""
    return f"agreement after {what}"


def _world_size() -> int:
    return current_communicator().world_size


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def agree_on_failure(
    error: BaseException | None,
    *,
    what: str,
    payload: Any = None,
    error_type: type[Exception] = RuntimeError,
    note: str = "",
) -> list[Any]:
    """Raises on every rank if any rank passes an exception; otherwise returns every rank's payload.

    Call it on every process, at the same point, with this process's exception or None.

    Args:
        error: what this process caught, or None when its part succeeded.
        what: the operation, for the message (``"save_state to run/ckpt"``).
        payload: a picklable value to exchange when no rank failed.
        error_type: the exception raised when a rank failed (its message names the failed ranks and
            their errors; on a failed rank it is chained to the original exception).
        note: a sentence appended to that message (what state things were left in).

    Returns:
        Each rank's payload, in rank order (``[payload]`` in a single process).

    Raises:
        error: unchanged, in a single process (there is no one to agree with).
        error_type: on every rank when one or more ranks failed.

    Example:
        >>> error = None
        >>> try:
        ...     write_my_part()
        ... except OSError as exc:
        ...     error = exc
        >>> agree_on_failure(error, what="writing the shards")
    """
    world = _world_size()
    if world == 1:
        if error is not None:
            raise error
        return [payload]
    report = (_describe(error), _portable(error, error_type)) if error is not None else None
    # Watched like every collective: a peer stalled while this rank saves is reported as a hang,
    # not left to the process group's raw timeout error.
    with SLOT.enter(_slot_name(what)):
        gathered = _gather_objects(
            current_communicator(), (report, None) if report is not None else (None, payload)
        )
    failed = {rank: report for rank, (report, _) in enumerate(gathered) if report is not None}
    if failed:
        ranks = ", ".join(str(rank) for rank in failed)
        details = "; ".join(f"rank {rank}: {text}" for rank, (text, _) in failed.items())
        noun = "rank" if len(failed) == 1 else "ranks"
        message = f"{what} failed on {noun} {ranks} ({details})"
        message = f"{message}; {note}" if note else message
        raise _rebuilt(message, [kind for _, kind in failed.values()], error_type) from error
    return [item for _, item in gathered]


def _portable(error: BaseException, error_type: type[Exception]) -> tuple[str, str, Any] | None:
    """How another rank can raise the same kind of error: a subclass of ``error_type`` that says how.

    An exception class opts in with ``agreement_payload()`` (picklable data) and a classmethod
    ``from_agreement(message, payload)``; a rank whose disk filled then makes every rank raise
    ``DiskFullError``, not only the generic ``error_type``.
    """
    cls = type(error)
    if not isinstance(error, error_type) or not hasattr(cls, "from_agreement"):
        return None
    get = getattr(error, "agreement_payload", None)
    return (cls.__module__, cls.__qualname__, get() if callable(get) else None)


def _rebuilt(
    message: str, kinds: list[tuple[str, str, Any] | None], error_type: type[Exception]
) -> Exception:
    """``error_type(message)``, or the failed ranks' own shared error class when they all agree on one."""
    first = kinds[0]
    if first is None or any(k is None or k[:2] != first[:2] for k in kinds):
        return error_type(message)
    import importlib

    try:
        cls = getattr(importlib.import_module(first[0]), first[1])
    except (ImportError, AttributeError):
        return error_type(message)
    if not (isinstance(cls, type) and issubclass(cls, error_type)):
        return error_type(message)
    rebuilt = getattr(cls, "from_agreement")(message, first[2])  # noqa: B009 - checked by _portable
    return rebuilt if isinstance(rebuilt, error_type) else error_type(message)


def agree_on_outcome(
    error: BaseException | None,
    *,
    what: str,
    error_type: type[Exception] = RuntimeError,
    note: str = "",
) -> None:
    """:func:`agree_on_failure` with nothing to exchange: one small all-reduce when all succeeded.

    Every rank learns the number of failed ranks; only when it is not zero (the same on every rank,
    so all take the same path) are the messages gathered to raise the same error everywhere.
    """
    communicator = current_communicator()
    if communicator.world_size == 1:
        if error is not None:
            raise error
        return
    failures = torch.tensor([0 if error is None else 1], dtype=torch.int32, device=communicator.device)
    with SLOT.enter(_slot_name(what)):
        communicator.all_reduce_sum_(failures)
    if int(failures.item()) == 0:
        return
    agree_on_failure(error, what=what, error_type=error_type, note=note)
