"""`accelerate.test_utils`: helpers for testing code built on accelerate, and the bundled self-check.

Names load on first use (PEP 562), so importing this package costs nothing until a helper is used.
``test_script``, ``test_ops`` and ``test_sync`` are the launchable scripts in ``scripts/``.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from accelerate._lazy import lazy_exports

_TESTING = "accelerate.test_utils.testing"
_LAZY: dict[str, str] = {
    "DEFAULT_LAUNCH_COMMAND": _TESTING,
    "RegressionDataset": "accelerate.test_utils.training",
    "RegressionModel": "accelerate.test_utils.training",
}
for _name in (
    "are_the_same_tensors", "assert_exception", "capture_call_output", "device_count", "execute_subprocess_async",
    "get_launch_command", "get_torch_dist_unique_port", "memory_allocated_func", "path_in_accelerate_package",
    "pytest_xdist_worker_id", "require_bnb", "require_cpu", "require_cuda", "require_cuda_or_hpu",
    "require_cuda_or_xpu", "require_fp16", "require_fp8", "require_huggingface_suite", "require_mlu", "require_mps",
    "require_multi_device", "require_multi_gpu", "require_multi_gpu_or_xpu", "require_multi_xpu", "require_musa",
    "require_non_cpu", "require_non_hpu", "require_non_torch_xla", "require_non_xpu", "require_npu",
    "require_pippy", "require_sdaa", "require_single_device", "require_single_gpu", "require_single_xpu",
    "require_torch_min_version", "require_torchao", "require_torchvision", "require_tpu",
    "require_transformer_engine", "require_transformer_engine_mxfp8", "require_xpu", "run_first", "skip", "slow",
    "torch_device",
):  # fmt: skip
    _LAZY[_name] = _TESTING
del _name

# Modules, not attributes of a module: loaded as `accelerate.test_utils.scripts.<name>`.
_SCRIPTS = ("test_ops", "test_script", "test_sync")

__all__ = sorted([*_LAZY, *_SCRIPTS])

_getattr, _dir = lazy_exports(__name__, _LAZY)


def __getattr__(name: str) -> Any:
    if name in _SCRIPTS:
        module: ModuleType = importlib.import_module(f"accelerate.test_utils.scripts.{name}")
        globals()[name] = module
        return module
    return _getattr(name)


def __dir__() -> list[str]:
    return sorted({*_dir(), *_SCRIPTS})
