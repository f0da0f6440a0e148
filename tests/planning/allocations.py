"""The live bytes of a profiled stretch of a process, from the profiler's own allocation events.

Every memory validation measures this way. The profiler reports each CPU allocation and free made on
the profiled (main) thread, with its address and size. It also reports a running count,
``total_allocated``, which is not usable: torch's CPU memory reporter adds a block to it when the
block is allocated while profiling, and subtracts it only when the block is freed on a profiled
thread. A block freed on another thread is never subtracted. That happens whenever gloo's worker
thread holds the last reference to a collective's buffers when it releases the asynchronous work,
which it does or not depending on which thread the scheduler runs first. The count then drifts up,
by a different amount on every run and rank, for the rest of the process: a dp_shard=2 x tp=2 step
that holds 21.06 MB at its peak read up to 27.96 MB after the expert-parallel validation (whose
all-to-alls leave many such blocks) had run in the same workers, and 23.9 MB in a loaded CI run.

So the live bytes are rebuilt here from the events: each block counts from its allocation until the
free of its address. A block freed unseen on another thread counts until its address is handed out
again, or to the end of the stretch. That can only add to a peak, and little: in 96 dp_shard=2 x
tp=2 steps, 7 peaks had one such ``tokens x hidden`` all-reduce output (256 KB) on them and 3 had
four (1 MB, 5%); the others measured the same to the byte.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

STEP = "validated step"  # the profiler range of the step whose peak a whole-run profile reports


def allocation_events(events: Iterable[Any]) -> list[tuple[int, int, int]]:
    """``(time_ns, address, bytes)`` of every allocation (bytes > 0) and free (bytes < 0) in a profiler
    event tree, in time order (a free before an allocation made in the same nanosecond)."""
    found, stack = [], list(events)
    while stack:
        event = stack.pop()
        fields = event.extra_fields
        if type(fields).__name__ == "_ExtraFields_Allocation":
            found.append((int(event.start_time_ns), int(fields.ptr), int(fields.alloc_size)))
        stack.extend(event.children)
    return sorted(found, key=lambda item: (item[0], item[2]))


def live_peak(events: Iterable[Any], start: int | None = None, stop: int | None = None) -> int:
    """The most bytes allocated during the profile and not yet freed, at any allocation between
    ``start`` and ``stop`` (ns; the whole profile by default). Frees of blocks allocated before the
    profile count nothing (the caller adds what was alive before it)."""
    live: dict[int, int] = {}
    total = peak = 0
    for time, address, size in allocation_events(events):
        if size > 0:
            # An address handed out again: its earlier block was freed on a thread not profiled.
            total += size - live.pop(address, 0)
            live[address] = size
            if (start is None or time >= start) and (stop is None or time <= stop):
                peak = max(peak, total)
        else:
            total -= live.pop(address, 0)
    return peak


def step_window(events: Iterable[Any]) -> tuple[int, int]:
    """Start and end (ns) of the ``STEP`` range in a profiler event tree."""
    stack = list(events)
    while stack:
        event = stack.pop()
        if event.name == STEP:
            return event.start_time_ns, event.start_time_ns + event.duration_time_ns
        stack.extend(event.children)
    raise RuntimeError(f"no {STEP!r} event in the profile")


@dataclasses.dataclass
class ProfiledRun:
    """What :func:`profiled_run` measured: ``peak``, set when its block ends."""

    peak: int = 0


@contextmanager
def profiled_run() -> Iterator[ProfiledRun]:
    """Profiles a whole run, from before its block builds anything (the Accelerator, the model, what
    an engine keeps that the model's parameters do not show), so that everything the process
    allocates counts; the block runs its steps with :func:`three_steps`. When it ends, ``peak`` is
    the live bytes' peak over the third step's allocations. Make the inputs before the block."""
    run = ProfiledRun()
    gc.collect()  # an earlier call's objects freed now, not during the profile
    torch.manual_seed(0)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        yield run
    events = prof.profiler.kineto_results.experimental_event_tree()  # type: ignore[union-attr]
    run.peak = live_peak(events, *step_window(events))


def three_steps(step: Callable[[], None]) -> None:
    """Two steps that make every lazily allocated buffer, then the measured one (the ``STEP`` range)."""
    step()
    step()
    with torch.profiler.record_function(STEP):
        step()
