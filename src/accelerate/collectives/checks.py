"""Debug mode's check before each collective: every process arrived, and with matching inputs.

Two ways a collective hangs: the processes call it with inputs that do not fit together (different
shapes, structures, dtypes, or different operations at the same point), or one process never calls
it at all (it skipped a branch, or went on to something else). Both hang inside torch until the
process group's timeout; without debug mode the hang watchdog (:mod:`accelerate.diagnostics.watchdog`)
then says where each process is, debug mode names the mismatch before the collective starts.

In debug mode each process, before its n-th collective, writes a short description of the call
(operation, shapes) under key ``n`` in the process group's key-value store, then waits until every
process has written key ``n``:
- all arrived, descriptions equal: the collective runs;
- all arrived, descriptions differ: every process raises, listing each one's operation and shapes;
- someone missing after the debug timeout (60 s; ``ACCELERATE_DEBUG_TIMEOUT``): every waiting
  process raises, naming the missing processes and the last collective each of them reached.
The store is the one torch.distributed already keeps for the group, so no collective is spent on
checking (a check that used a collective would itself hang on a missing process).
"""

from __future__ import annotations

import json
import time
from typing import Any

import torch.distributed as dist

from accelerate.collectives.communicator import Communicator


class DistributedOperationException(RuntimeError):
    """Processes called a collective with inputs that do not match, or some did not call it."""


_HINTS = {
    "pad_across_processes": "Pass the same structure of tensors, with the same dimensions and dtypes, everywhere.",
    "broadcast_object_list": "Pass a list of the same length on every process.",
}
_DEFAULT_HINT = "Make the shapes agree first (for instance with `pad_across_processes`)."

_PREFIX = "accelerate/debug"


def _store() -> Any:
    getter = getattr(dist.distributed_c10d, "_get_default_store", None)
    if getter is None:  # pragma: no cover - every torch we support has it
        return None
    try:
        return getter()
    except (RuntimeError, ValueError):
        return None


def check_collective(comm: Communicator, operation: str, description: list[str]) -> None:
    """Raises :class:`DistributedOperationException` on every waiting process unless all processes
    reached this collective with equal ``description``s. Debug mode only; see the module docstring."""
    store = _store()
    if store is None:
        _check_by_gather(comm, operation, description)
        return
    comm.debug_round += 1
    n, rank, world = comm.debug_round, comm.rank, comm.world_size
    base = f"{_PREFIX}/{comm.debug_generation}"
    store.set(f"{base}/{n}/{rank}", json.dumps([operation, description]))
    store.set(f"{base}/last/{rank}", json.dumps([n, operation]))
    if n > 2:
        # Everyone finished round n-2 before anyone could start round n (they all passed n-1).
        store.delete_key(f"{base}/{n - 2}/{rank}")
    keys = [f"{base}/{n}/{r}" for r in range(world)]
    _wait_for_everyone(store, comm, operation, base, keys)
    everyone = [json.loads(raw) for raw in store.multi_get(keys)]
    _compare(operation, everyone)


def _wait_for_everyone(store: Any, comm: Communicator, operation: str, base: str, keys: list[str]) -> None:
    timeout = comm.debug_timeout.total_seconds()
    deadline = time.monotonic() + timeout
    delay = 0.0002
    while not store.check(keys):
        if time.monotonic() > deadline:
            missing = [r for r, key in enumerate(keys) if not store.check([key])]
            raise DistributedOperationException(
                _missing_message(store, comm, operation, base, missing, timeout)
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.02)


def _missing_message(
    store: Any, comm: Communicator, operation: str, base: str, missing: list[int], timeout: float
) -> str:
    who = ", ".join(str(r) for r in missing)
    waiting = ", ".join(str(r) for r in range(comm.world_size) if r not in missing)
    lines = [
        f"`{operation}` (collective #{comm.debug_round} of process {comm.rank}) cannot start: process(es) "
        f"{who} did not reach it within {timeout:g} s (waiting: {waiting})."
    ]
    for r in missing:
        key = f"{base}/last/{r}"
        if store.check([key]):
            last_n, last_op = json.loads(store.get(key))
            lines.append(f"  - process {r}: its last collective through accelerate was #{last_n} `{last_op}`")
        else:
            lines.append(f"  - process {r}: has made no collective call through accelerate yet")
    lines.append(
        "Every process must call each collective (gather, reduce, broadcast, wait_for_everyone, ...) in the "
        "same order; one called inside `if accelerator.is_main_process:` hangs the others. If the missing "
        "process is only slow (saving or evaluating alone), raise ACCELERATE_DEBUG_TIMEOUT (seconds)."
    )
    return "\n".join(lines)


def _compare(operation: str, everyone: list[Any]) -> None:
    if all(entry == everyone[0] for entry in everyone):
        return
    ops = {entry[0] for entry in everyone}
    if len(ops) > 1:
        listing = "\n".join(f"  - process {r}: `{op}` {sig}" for r, (op, sig) in enumerate(everyone))
        raise DistributedOperationException(
            f"Cannot apply `{operation}`: the processes reached different collectives at the same point.\n"
            f"{listing}\nEvery process must call the same collectives in the same order."
        )
    listing = "\n".join(f"  - process {r}: {sig}" for r, (_, sig) in enumerate(everyone))
    raise DistributedOperationException(
        f"Cannot apply `{operation}`: the processes passed different inputs (structure, shape or dtype).\n"
        f"{listing}\n{_HINTS.get(operation, _DEFAULT_HINT)}"
    )


def _check_by_gather(comm: Communicator, operation: str, description: list[str]) -> None:
    """Fallback without a store: compares descriptions (cannot detect a missing process)."""
    everyone: list[Any] = [None] * comm.world_size
    dist.all_gather_object(everyone, [operation, description])
    _compare(operation, everyone)
