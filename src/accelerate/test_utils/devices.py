"""The device tests run on: ``torch_device``, ``device_count``, ``get_backend``, ``memory_allocated_func``."""

from __future__ import annotations

from collections.abc import Callable

from accelerate.test_utils import probes


def memory_allocated_func() -> int:
    """Bytes the test device's caching allocator holds for tensors right now.

    The CPU has no allocator counter in torch, so on the CPU this is 0: compare it across steps only
    on an accelerator (tests that do so are usually marked ``@require_non_cpu``).
    """
    device = probes.accelerator_device()
    if device == "cpu":
        return 0
    import torch

    if device == "mps":
        return int(torch.mps.current_allocated_memory())
    counter = getattr(getattr(torch, device, None), "memory_allocated", None)
    if counter is None:
        raise NotImplementedError(
            f"torch.{device} has no memory_allocated(); cannot measure memory on {device}"
        )
    return int(counter())


def get_backend() -> tuple[str, int, Callable[[], int]]:
    """``(device type, device count, memory_allocated_func)`` for the device tests run on.

    The device type is the first available accelerator (``cuda``, ``xpu``, ``mps``, ...) or ``"cpu"``;
    the CPU counts as one device.
    """
    device = probes.accelerator_device()
    return device, probes.device_count_of(device), memory_allocated_func


torch_device, device_count, _ = get_backend()
