"""Environment helpers: read and patch ``os.environ``, and ask the machine what it has.

Everything reads the live environment when called. The GPU questions (``get_gpu_info``,
``check_cuda_fp8_capability``, ...) answer truthfully on a machine without a GPU instead of raising.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import platform
import shutil
import subprocess
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

logger = logging.getLogger(__name__)

_TRUE_STRINGS = ("y", "yes", "t", "true", "on", "1")
_FALSE_STRINGS = ("n", "no", "f", "false", "off", "0")


def str_to_bool(value: str, to_bool: bool = False) -> int | bool:
    """``1``/``0`` (or ``True``/``False`` with ``to_bool=True``) for a yes/no string, case-insensitive.

    Accepts y/yes/t/true/on/1 and n/no/f/false/off/0; anything else is a ``ValueError``.
    """
    lowered = str(value).strip().lower()
    if lowered in _TRUE_STRINGS:
        return True if to_bool else 1
    if lowered in _FALSE_STRINGS:
        return False if to_bool else 0
    raise ValueError(
        f"str_to_bool({value!r}): not a yes/no value; use one of {', '.join(_TRUE_STRINGS + _FALSE_STRINGS)}."
    )


def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """The boolean environment variable ``key`` (``default`` when unset)."""
    value = os.environ.get(key)
    if value is None:
        return bool(default)
    try:
        return str_to_bool(value) == 1
    except ValueError:
        raise ValueError(
            f"Environment variable {key}={value!r} is not a boolean; use 1/0, true/false or yes/no."
        ) from None


def parse_choice_from_env(key: str, default: str = "no") -> str:
    """The environment variable ``key`` as a string, ``default`` when unset."""
    return os.environ.get(key, str(default))


def get_int_from_env(env_keys: Iterable[str], default: int) -> int:
    """The first of ``env_keys`` that holds a non-negative integer, else ``default``."""
    for key in env_keys:
        raw = os.environ.get(key, "")
        try:
            value = int(raw)
        except ValueError:
            continue
        if value >= 0:
            return value
    return default


@contextmanager
def patch_environment(**kwargs: Any) -> Iterator[None]:
    """Sets environment variables (names upper-cased, values ``str()``-ed) inside a ``with`` block.

    On exit each variable gets back its previous value, or is removed if it was not set before.

    Example:
        >>> with patch_environment(master_port=29501, omp_num_threads=1):
        ...     launch()
    """
    saved: dict[str, str | None] = {}
    for key, value in kwargs.items():
        name = key.upper()
        saved.setdefault(name, os.environ.get(name))
        os.environ[name] = str(value)
    try:
        yield
    finally:
        for name, previous in saved.items():
            if previous is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = previous


@contextmanager
def clear_environment() -> Iterator[None]:
    """Runs a ``with`` block with an empty ``os.environ``; the original is restored on exit.

    The same ``os.environ`` object is emptied and refilled (not replaced), so references to it held
    elsewhere stay valid.
    """
    saved = dict(os.environ)
    os.environ.clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _accelerate_vars() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith("ACCELERATE_")}


def _restore_accelerate_vars(before: Mapping[str, str]) -> None:
    for key in _accelerate_vars():
        if key not in before:
            del os.environ[key]
    os.environ.update(before)


def purge_accelerate_environment(func_or_cls: T) -> T:
    """Decorator: ``ACCELERATE_*`` variables set while the function (or each test of the class) runs
    are removed afterwards, and changed or removed ones get their old values back, also when it fails.

    Meant for tests that create an ``Accelerator``, which may export settings to the environment. On a
    ``unittest.TestCase`` the snapshot spans the whole ``run`` (``setUp`` .. ``tearDown`` and cleanups,
    also when ``setUp`` fails); on other classes each ``test*`` method is wrapped. Subclasses of a
    decorated class are covered too, whatever they override.
    """
    if isinstance(func_or_cls, type):
        return _purge_class(func_or_cls)  # type: ignore[return-value]
    if not callable(func_or_cls):
        raise TypeError(
            f"purge_accelerate_environment decorates a function or a class, got {type(func_or_cls).__name__}"
        )
    return _purged(func_or_cls)  # type: ignore[return-value]


# Set on a wrapper so that a method reached again (inherited, or decorated twice) is wrapped once.
_PURGED = "_accelerate_is_purged_environment_wrapped"


def _purged(func: Callable[..., Any]) -> Callable[..., Any]:
    if getattr(func, _PURGED, False):
        return func

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before = _accelerate_vars()
        try:
            return func(*args, **kwargs)
        finally:
            _restore_accelerate_vars(before)

    setattr(wrapper, _PURGED, True)
    return wrapper


def _purge_class(cls: type) -> type:
    # unittest is looked up, not imported: if it was never imported, no class can be a TestCase.
    unittest = sys.modules.get("unittest")
    if unittest is not None and issubclass(cls, unittest.TestCase):
        # TestCase.run spans setUp, the test, tearDown and the cleanups, and still returns when setUp
        # raises (then tearDown is skipped, so wrapping setUp/tearDown would leak).
        names = ["run"]
    else:
        names = [name for name in dir(cls) if name.startswith("test")]
    for name in names:
        # Plain functions only: a staticmethod or classmethod read off the class is no longer one.
        if isinstance(inspect.getattr_static(cls, name), types.FunctionType):
            setattr(cls, name, _purged(getattr(cls, name)))
    own_hook = cls.__dict__.get("__init_subclass__")

    def purge_subclass(subclass: type, /, **kwargs: Any) -> None:
        if isinstance(own_hook, classmethod):
            own_hook.__func__(subclass, **kwargs)
        else:
            super(cls, subclass).__init_subclass__(**kwargs)  # type: ignore[arg-type]
        _purge_class(subclass)

    cls.__init_subclass__ = classmethod(purge_subclass)  # type: ignore[assignment]
    return cls


_UNSAFE_ENV_CHARS = (";", "\n", "<", ">", " ")


def convert_dict_to_env_variables(current_env: Mapping[str, Any]) -> list[str]:
    """``KEY=VALUE\\n`` lines for an environment file (as written for DeepSpeed's multi-node launch).

    Entries whose key or value holds a character that would break or inject into such a file
    (``;``, newline, ``<``, ``>``, space), or whose key is empty, are skipped with a warning.
    """
    lines = []
    for key, value in current_env.items():
        text = str(value)
        if key and not any(c in key or c in text for c in _UNSAFE_ENV_CHARS):
            lines.append(f"{key}={text}\n")
        else:
            logger.warning(
                "Skipping environment variable %r=%r: not safe to write to an env file.", key, text
            )
    return lines


@dataclass
class CPUInformation:
    """Where this CPU process sits, as read from the launcher's variables (torchrun, MPI)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1


def get_cpu_distributed_information() -> CPUInformation:
    """Rank and sizes from torchrun's or an MPI implementation's variables (one process when none are set)."""
    return CPUInformation(
        rank=get_int_from_env(["RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"], 0),
        world_size=get_int_from_env(
            ["WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"], 1
        ),
        local_rank=get_int_from_env(
            ["LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK"], 0
        ),
        local_world_size=get_int_from_env(
            [
                "LOCAL_WORLD_SIZE",
                "MPI_LOCALNRANKS",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
                "MV2_COMM_WORLD_LOCAL_SIZE",
            ],
            1,
        ),
    )


def are_libraries_initialized(*library_names: str) -> list[str]:
    """Which of ``library_names`` are already imported in this process (e.g. before a fork)."""
    return [name for name in library_names if name in sys.modules]


def _nvidia_smi(*query: str) -> list[str]:
    """Lines of ``nvidia-smi --query-gpu=...``; empty when there is no NVIDIA driver."""
    exe = shutil.which("nvidia-smi")
    if exe is None and platform.system() == "Windows":
        exe = shutil.which("nvidia-smi.exe")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={','.join(query)}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def get_gpu_info() -> tuple[list[str], int]:
    """Names of the visible NVIDIA GPUs and how many there are (``([], 0)`` without any)."""
    names = _nvidia_smi("name")
    return names, len(names)


def get_driver_version() -> str | None:
    """The NVIDIA driver version, or ``None`` on a machine without an NVIDIA driver."""
    versions = _nvidia_smi("driver_version")
    return versions[0] if versions else None


def check_cuda_p2p_ib_support() -> bool:
    """False when the GPUs here cannot use NCCL's peer-to-peer / InfiniBand paths.

    Consumer RTX 40xx cards in a multi-GPU machine only support them with driver 550.40.07 or newer;
    the launcher then sets ``NCCL_P2P_DISABLE=1`` and ``NCCL_IB_DISABLE=1``. Without such cards (or
    without GPUs) there is nothing to disable, so the answer is True.
    """
    names, count = get_gpu_info()
    if count < 2 or not any("RTX 40" in name for name in names):
        return True
    driver = get_driver_version()
    if driver is None:
        return False
    from accelerate.utils.versions import compare_versions

    try:
        return compare_versions(driver, ">=", "550.40.07")
    except ValueError:
        return False


@functools.cache
def check_cuda_fp8_capability() -> bool:
    """Whether the current CUDA device can compute in fp8 (compute capability 8.9 or newer); False without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability() >= (8, 9)


def get_current_device_type() -> tuple[str, str]:
    """``(device type, distributed type)`` of this machine's accelerator without initialising it,
    e.g. ``("cuda", "MULTI_GPU")`` or ``("cpu", "MULTI_CPU")``.
    """
    from accelerate.utils import imports

    candidates = (
        (imports.is_torch_xla_available, "xla", "XLA"),
        (imports.is_mlu_available, "mlu", "MULTI_MLU"),
        (imports.is_sdaa_available, "sdaa", "MULTI_SDAA"),
        (imports.is_musa_available, "musa", "MULTI_MUSA"),
        (imports.is_npu_available, "npu", "MULTI_NPU"),
        (imports.is_hpu_available, "hpu", "MULTI_HPU"),
        (imports.is_neuron_available, "neuron", "MULTI_NEURON"),
        (imports.is_xpu_available, "xpu", "MULTI_XPU"),
        (imports.is_cuda_available, "cuda", "MULTI_GPU"),
    )
    for probe, device, distributed in candidates:
        if probe():
            return device, distributed
    return "cpu", "MULTI_CPU"


def override_numa_affinity(local_process_index: int, verbose: bool | None = None) -> None:
    """Pins this process to the CPUs of the NUMA node nearest its GPU (NVIDIA GPUs only, Linux).

    Needs an NVIDIA GPU and ``pynvml``; on a machine without them this raises the hardware error
    rather than silently leaving the affinity unchanged.
    """
    from accelerate.utils.errors import requires_hardware
    from accelerate.utils.imports import is_cuda_available, is_pynvml_available

    if not (is_cuda_available() and is_pynvml_available() and hasattr(os, "sched_setaffinity")):
        raise requires_hardware(
            "NUMA affinity (`override_numa_affinity`)",
            "an NVIDIA GPU, Linux and `pip install pynvml`",
        )
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(local_process_index)
    # The mask is an array of 64-bit words, one bit per CPU, lowest CPU in the lowest bit of word 0.
    words = pynvml.nvmlDeviceGetCpuAffinity(handle, ((os.cpu_count() or 64) + 63) // 64)
    cpus = [w * 64 + bit for w, word in enumerate(words) for bit in range(64) if (word >> bit) & 1]
    os.sched_setaffinity(0, cpus)
    if verbose if verbose is not None else parse_flag_from_env("ACCELERATE_DEBUG_MODE"):
        logger.info("Process %d is now pinned to CPUs %s", local_process_index, cpus)


@functools.cache
def set_numa_affinity(local_process_index: int, verbose: bool | None = None) -> None:
    """:func:`override_numa_affinity`, done once per process and index."""
    override_numa_affinity(local_process_index=local_process_index, verbose=verbose)
