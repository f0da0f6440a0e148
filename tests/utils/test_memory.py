"""find_executable_batch_size: which errors shrink the batch, and agreement across processes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from accelerate.state import PartialState
from accelerate.utils import find_executable_batch_size, should_reduce_batch_size
from tests.helpers.pool import WorkerPool


def _real_cpu_allocation_failure() -> RuntimeError:
    """What torch's CPU allocator raises for an impossible request (100 TB)."""
    try:
        torch.empty(10**14, dtype=torch.uint8)
    except RuntimeError as exc:
        return exc
    pytest.skip("this machine allocated 100 TB lazily; no CPU allocation failure to observe")


@pytest.mark.parametrize(
    "error",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        MemoryError(),
        RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory"),
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"),
        RuntimeError("CUDA out of memory."),
    ],
    ids=["torch-oom", "memory-error", "alloc-cpu-enforce", "default-cpu-allocator", "cuda-message"],
)
def test_out_of_memory_errors_reduce_the_batch(error: BaseException) -> None:
    assert should_reduce_batch_size(error)


def test_a_real_cpu_allocation_failure_reduces_the_batch() -> None:
    assert should_reduce_batch_size(_real_cpu_allocation_failure())


@pytest.mark.parametrize(
    "error", [ValueError("out of memory"), RuntimeError("shape mismatch"), RuntimeError("out of memory", 2)]
)
def test_other_errors_do_not(error: BaseException) -> None:
    assert not should_reduce_batch_size(error)


def test_single_process_shrinks_by_a_tenth_until_it_fits() -> None:
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=128)
    def train(batch_size: int, scale: int) -> int:
        tried.append(batch_size)
        if batch_size > 20:
            torch.empty(10**14, dtype=torch.uint8)  # a genuine CPU allocation failure
        return batch_size * scale

    assert train(3) == 57
    # Upstream's rule: int(size * 0.9) after each out-of-memory error.
    assert tried == [128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36, 32, 28, 25, 22, 19]


def test_the_size_found_is_kept_for_the_next_call() -> None:
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=16)
    def train(batch_size: int) -> int:
        tried.append(batch_size)
        if batch_size > 12:
            raise MemoryError
        return batch_size

    assert train() == 12 and tried == [16, 14, 12]
    tried.clear()
    assert train() == 12 and tried == [12]  # as upstream: no second search from 16


def test_single_process_custom_reduction_and_exhaustion() -> None:
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=10, reduce_batch_size_fn=lambda size: size - 3)
    def never_fits(batch_size: int) -> None:
        tried.append(batch_size)
        raise MemoryError

    with pytest.raises(RuntimeError, match=r"No executable batch size found, reached zero\."):
        never_fits()
    assert tried == [10, 7, 4, 1]


def test_upstreams_reduction_without_an_argument_is_accepted() -> None:
    tried: list[int] = []
    sizes = iter([5, 1])

    @find_executable_batch_size(starting_batch_size=9, reduce_batch_size_fn=lambda: next(sizes))
    def train(batch_size: int) -> int:
        tried.append(batch_size)
        if batch_size > 1:
            raise MemoryError
        return batch_size

    assert train() == 1
    assert tried == [9, 5, 1]


def test_single_process_other_errors_propagate_unchanged() -> None:
    class Broken(ValueError):
        pass

    @find_executable_batch_size(starting_batch_size=8)
    def train(batch_size: int) -> None:
        raise Broken("bad data")

    with pytest.raises(Broken, match="bad data"):
        train()
    with pytest.raises(TypeError, match="takes batch_size as its first argument"):
        train(4)


def search_where_rank_1_fails_above_32(failure: str) -> dict[str, Any]:
    """Rank 1 runs out of memory above 32 (rank 0 never does); returns what each rank tried."""
    rank = PartialState().process_index
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=128)
    def train(batch_size: int) -> int:
        tried.append(batch_size)
        if rank == 1 and batch_size > 32:
            if failure == "cpu-allocator":
                torch.empty(10**14, dtype=torch.uint8)
            raise torch.OutOfMemoryError(f"CUDA out of memory at {batch_size}")
        return batch_size

    # The decorated function holds no collective before the failure point (a rank that failed
    # there would leave the other waiting in it); after the search the ranks meet with one size.
    total = torch.tensor([train()])
    torch.distributed.all_reduce(total)
    return {"result": int(total.item()), "tried": tried}


@pytest.mark.parametrize("failure", ["cpu-allocator", "torch-oom-error"])
def test_every_rank_retries_when_one_runs_out_of_memory(pool2: WorkerPool, failure: str) -> None:
    results = pool2.run(search_where_rank_1_fails_above_32, failure)
    for result in results:
        assert result == {"result": 64, "tried": [128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36, 32]}


def search_where_rank_0_breaks(kind: str) -> str:
    rank = PartialState().process_index

    @find_executable_batch_size(starting_batch_size=64 if kind == "sizes" and rank == 1 else 128)
    def train(batch_size: int) -> int:
        if kind == "error" and rank == 0:
            raise KeyError("no such column")
        return batch_size

    try:
        train()
    except RuntimeError as exc:
        return str(exc)
    return "no error"


def test_an_other_error_on_one_rank_is_raised_on_every_rank(pool2: WorkerPool) -> None:
    for message in pool2.run(search_where_rank_0_breaks, "error"):
        assert "train(batch_size=128) failed on rank 0" in message
        assert "KeyError" in message and "no such column" in message


def test_ranks_that_start_with_different_sizes_are_told(pool2: WorkerPool) -> None:
    for message in pool2.run(search_where_rank_0_breaks, "sizes"):
        assert "different batch sizes (rank 0: 128, rank 1: 64)" in message


def search_with_collectives_where_rank_1_fails_above_32(step: str) -> dict[str, Any]:
    """A training function that communicates; rank 1 runs out of memory above 32 before its collective.

    Rank 0 meanwhile enters the collective (the gather, or DDP's gradient all-reduce) and waits there
    for rank 1, as in a real run where one GPU has less free memory.
    """
    from accelerate import Accelerator

    accelerator = Accelerator()
    rank = accelerator.process_index
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=40)
    def train(batch_size: int) -> float:
        tried.append(batch_size)
        accelerator.free_memory()
        model = accelerator.prepare(torch.nn.Linear(4, 1))
        out = model(torch.ones(batch_size, 4))
        if rank == 1 and batch_size > 32:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {batch_size} GiB")
        if step == "gather":
            return float(accelerator.gather(out.detach()).shape[0])
        accelerator.backward(out.sum())
        return float(model.module.weight.grad.sum())

    result = train()
    # The group the search left behind works: one more collective, with every rank in it.
    total = accelerator.reduce(torch.tensor([float(batch) for batch in tried[-1:]]), "sum")
    return {"result": result, "tried": tried, "after": total.tolist()}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("step", ["gather", "ddp"])
def test_ranks_agree_when_one_runs_out_of_memory_beside_a_collective(pool2: WorkerPool, step: str) -> None:
    results = pool2.run(search_with_collectives_where_rank_1_fails_above_32, step, timeout=90)
    expected = 64.0 if step == "gather" else 32.0 * 4
    for result in results:
        assert result == {"result": expected, "tried": [40, 36, 32], "after": [64.0]}
