"""find_executable_batch_size against a real CUDA out-of-memory error, and the memory it leaves behind.

Marked ``cuda``: skipped without a GPU (conftest); ``make gpu-check`` runs them on a lent GPU.
"""

from __future__ import annotations

import pytest
import torch

from accelerate.utils import find_executable_batch_size, release_memory

pytestmark = pytest.mark.cuda


def test_shrinks_the_batch_size_after_each_real_cuda_oom() -> None:
    total = torch.cuda.get_device_properties(0).total_memory
    unit = total // 16  # batch sizes 64, 32 and 16 ask for 4x, 2x and 1x the GPU's memory; 8 for half
    tried: list[int] = []

    # Halving, so that no size lands near the card's capacity (the default 10% steps would try 15/16).
    @find_executable_batch_size(starting_batch_size=64, reduce_batch_size_fn=lambda size: size // 2)
    def fill(batch_size: int) -> int:
        tried.append(batch_size)
        block = torch.empty(batch_size * unit, dtype=torch.uint8, device="cuda")
        block.fill_(1)
        return batch_size

    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(0)
    assert fill() == 8
    assert tried == [64, 32, 16, 8]
    # Nothing of the failed attempts (or the successful one's block) is still allocated.
    assert torch.cuda.memory_allocated(0) == before


def test_oom_after_an_allocation_releases_the_attempts_tensors() -> None:
    total = torch.cuda.get_device_properties(0).total_memory
    held: list[torch.Tensor] = []

    @find_executable_batch_size(starting_batch_size=4)
    def grow(batch_size: int) -> int:
        keep = torch.empty(total // 4, dtype=torch.uint8, device="cuda")  # fits on its own
        if batch_size > 1:
            torch.empty(total, dtype=torch.uint8, device="cuda")  # never fits next to it
        held.append(keep)
        return batch_size

    assert grow() == 1
    assert len(held) == 1  # the failed attempts' tensors were dropped with their frames
    held[:] = release_memory(*held)
    assert torch.cuda.memory_allocated(0) < total // 8
