from __future__ import annotations

import torch

from accelerate.test_utils import devices, probes


def test_torch_device_and_count_match_torch() -> None:
    device, count, memory = devices.get_backend()
    assert (device, count) == (devices.torch_device, devices.device_count)
    if torch.cuda.is_available():
        assert device == "cuda" and count == torch.cuda.device_count()
    elif probes.accelerator_device() == "cpu":
        assert device == "cpu" and count == 1
    assert memory is devices.memory_allocated_func


def test_memory_allocated_func() -> None:
    if devices.torch_device == "cpu":
        assert devices.memory_allocated_func() == 0  # torch has no CPU allocator counter
    else:
        assert devices.memory_allocated_func() >= 0


def test_device_probes_cpu() -> None:
    assert probes.device_available("cpu") and probes.device_count_of("cpu") == 1
    assert probes.device_available("not_a_device") is False and probes.device_count_of("not_a_device") == 0
    assert probes.torch_version_at_least("2.0") and not probes.torch_version_at_least("99")
