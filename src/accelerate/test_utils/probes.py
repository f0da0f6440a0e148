"""What this machine and this install can do, asked cheaply for the test decorators.

Package probes only look for the package (``importlib.util.find_spec``), never import it. Device
probes import torch (and a vendor's torch plugin only when that plugin is installed). A second kind
of probe, :func:`implements`, asks whether *this* accelerate has the module behind a feature, so a
test written for upstream's DeepSpeed, FSDP or fp8 support skips here instead of failing.
"""

from __future__ import annotations

import importlib
import importlib.util
from functools import cache

# Where a device type needs a vendor plugin before ``torch.<device>`` exists.
_DEVICE_PLUGINS: dict[str, str] = {
    "npu": "torch_npu",
    "mlu": "torch_mlu",
    "musa": "torch_musa",
    "sdaa": "torch_sdaa",
    "hpu": "habana_frameworks",
}


@cache
def has_package(name: str) -> bool:
    """True when ``name`` can be imported (found on the path; nothing is imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that fails to import, or a broken spec
        return False


def implements(module: str) -> bool:
    """True when this accelerate ships ``module`` (e.g. ``accelerate.backends.deepspeed``)."""
    return has_package(module)


@cache
def device_available(device: str) -> bool:
    """True when torch can use at least one ``device`` (``cuda``, ``xpu``, ``mps``, ``npu``, ...)."""
    if device == "cpu":
        return True
    plugin = _DEVICE_PLUGINS.get(device)
    if plugin is not None:
        if not has_package(plugin):
            return False
        try:
            importlib.import_module("habana_frameworks.torch" if device == "hpu" else plugin)
        except Exception:  # noqa: BLE001 - a plugin that cannot load means the device cannot be used
            return False
    import torch

    if device == "mps":
        return bool(torch.backends.mps.is_available())
    backend = getattr(torch, device, None)
    is_available = getattr(backend, "is_available", None)
    return bool(is_available()) if callable(is_available) else False


def device_count_of(device: str) -> int:
    """How many ``device`` units torch sees (1 for the CPU and MPS, 0 when unavailable)."""
    if not device_available(device):
        return 0
    if device in ("cpu", "mps"):
        return 1
    import torch

    return int(getattr(torch, device).device_count())


# Order matters: a machine with CUDA and a CPU tests on CUDA.
_DEVICE_ORDER = ("cuda", "mlu", "sdaa", "musa", "npu", "xpu", "hpu", "mps")


def accelerator_device() -> str:
    """The device type tests run on: the first available accelerator, else ``"cpu"``."""
    for device in _DEVICE_ORDER:
        if device_available(device):
            return device
    return "cpu"


def torch_version_at_least(version: str) -> bool:
    """True when the installed torch is ``version`` or newer (local labels such as ``+cpu`` ignored)."""
    import torch
    from packaging.version import Version

    return Version(Version(torch.__version__).base_version) >= Version(version)
