"""The live-bytes rebuild of tests/planning/allocations.py, on hand-made event trees."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tests.planning.allocations import allocation_events, live_peak


class _ExtraFields_Allocation:  # noqa: N801 - the profiler's class name, which the rebuild looks for
    def __init__(self, ptr: int, alloc_size: int) -> None:
        self.ptr, self.alloc_size = ptr, alloc_size


@dataclass
class _Event:
    start_time_ns: int
    extra_fields: Any = None
    children: list[Any] = field(default_factory=list)


def _memory(time: int, address: int, size: int) -> _Event:
    return _Event(time, _ExtraFields_Allocation(address, size))


def test_events_come_in_time_order_from_any_depth_a_free_first_within_a_nanosecond() -> None:
    op = _Event(0, None, [_memory(5, 1, 10), _Event(1, None, [_memory(2, 2, 20)])])
    tree = [op, _memory(5, 2, -20)]
    assert allocation_events(tree) == [(2, 2, 20), (5, 2, -20), (5, 1, 10)]


def test_a_free_ends_a_block_and_a_block_from_before_the_profile_counts_nothing() -> None:
    tree = [
        _memory(1, 1, 100),
        _memory(2, 2, 50),
        _memory(3, 1, -100),
        _memory(4, 9, -999),
        _memory(5, 3, 10),
    ]
    assert live_peak(tree) == 150


def test_an_address_handed_out_again_retires_the_block_freed_unseen_before_it() -> None:
    # Block 1 is freed on another thread (no event); its address comes back for a smaller block.
    tree = [_memory(1, 1, 100), _memory(2, 1, 30), _memory(3, 2, 80)]
    assert live_peak(tree) == 110


def test_the_peak_is_taken_inside_the_window_only() -> None:
    tree = [_memory(1, 1, 500), _memory(2, 1, -500), _memory(3, 2, 40), _memory(4, 3, 60)]
    assert live_peak(tree, start=3, stop=4) == 100
    assert live_peak(tree) == 500


def test_a_real_profile_counts_a_tensor_made_and_dropped_inside_it() -> None:
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        kept = torch.ones(1024)
        dropped = torch.ones(2048)
        del dropped
    events = prof.profiler.kineto_results.experimental_event_tree()  # type: ignore[union-attr]
    assert live_peak(events) >= (1024 + 2048) * 4
    assert kept.numel() == 1024
