"""Availability probes (``is_*_available``) and the one error style for a missing optional dependency.

A package probe asks ``importlib.util.find_spec`` (and package metadata for versions), so asking
imports nothing; answers are cached for the life of the process. A hardware probe (CUDA, XPU, MPS,
NPU, ...) imports torch, which anyone asking about a device is about to use anyway, and never
initialises a device. Probes for packages that are not installed answer False.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from accelerate.utils.environment import parse_flag_from_env, patch_environment

F = TypeVar("F", bound=Callable[..., Any])

# Upstream's switch for the torch_xla probes (on unless USE_TORCH_XLA says otherwise).
USE_TORCH_XLA = parse_flag_from_env("USE_TORCH_XLA", default=True)


@functools.cache
def is_package_available(name: str) -> bool:
    """Whether ``name`` can be imported (found on the path), without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a dotted name whose parent is missing, or a broken spec
        return False


def _version_at_least(package: str, minimum: str | None, distribution: str | None = None) -> bool:
    """``package`` is importable and its installed version is ``minimum`` or newer (any, if None)."""
    if not is_package_available(package):
        return False
    if minimum is None:
        return True
    from accelerate.utils.versions import compare_versions

    try:
        return compare_versions(distribution or package, ">=", minimum)
    except importlib.metadata.PackageNotFoundError:
        return False


def _named(func: F, name: str, doc: str) -> F:
    func.__name__ = func.__qualname__ = name
    func.__doc__ = doc
    return func


def _package_probe(name: str, *modules: str) -> Callable[[], bool]:
    """The zero-argument probe ``name``: True when any of ``modules`` is importable."""

    def probe() -> bool:
        return any(is_package_available(m) for m in modules)

    return _named(
        probe, name, f"Whether {' or '.join(f'`{m}`' for m in modules)} is installed (not imported)."
    )


# Plain package probes: one row each (the function name says what it probes).
is_aim_available = _package_probe("is_aim_available", "aim")
is_amdsmi_available = _package_probe("is_amdsmi_available", "amdsmi")
is_boto3_available = _package_probe("is_boto3_available", "boto3")
is_clearml_available = _package_probe("is_clearml_available", "clearml")
is_comet_ml_available = _package_probe("is_comet_ml_available", "comet_ml")
is_datasets_available = _package_probe("is_datasets_available", "datasets")
is_deepspeed_available = _package_probe("is_deepspeed_available", "deepspeed")
is_dvclive_available = _package_probe("is_dvclive_available", "dvclive")
is_import_timer_available = _package_probe("is_import_timer_available", "import_timer")
is_lomo_available = _package_probe("is_lomo_available", "lomo_optim")
is_matplotlib_available = _package_probe("is_matplotlib_available", "matplotlib")
is_mlflow_available = _package_probe("is_mlflow_available", "mlflow")
is_msamp_available = _package_probe("is_msamp_available", "msamp")
is_pandas_available = _package_probe("is_pandas_available", "pandas")
is_peft_available = _package_probe("is_peft_available", "peft")
is_pynvml_available = _package_probe("is_pynvml_available", "pynvml")
is_pytest_available = _package_probe("is_pytest_available", "pytest")
is_sagemaker_available = _package_probe("is_sagemaker_available", "sagemaker")
is_schedulefree_available = _package_probe("is_schedulefree_available", "schedulefree")
is_swanlab_available = _package_probe("is_swanlab_available", "swanlab")
is_tensorboard_available = _package_probe("is_tensorboard_available", "tensorboard", "tensorboardX")
is_timm_available = _package_probe("is_timm_available", "timm")
is_torchdata_available = _package_probe("is_torchdata_available", "torchdata")
is_torchvision_available = _package_probe("is_torchvision_available", "torchvision")
is_tqdm_available = _package_probe("is_tqdm_available", "tqdm")
is_trackio_available = _package_probe("is_trackio_available", "trackio")
is_transformer_engine_available = _package_probe("is_transformer_engine_available", "transformer_engine")
is_transformers_available = _package_probe("is_transformers_available", "transformers")
is_triton_available = _package_probe("is_triton_available", "triton")
is_wandb_available = _package_probe("is_wandb_available", "wandb")


def is_rich_available() -> bool:
    """Whether `rich` is installed and ``ACCELERATE_ENABLE_RICH`` asks for rich tracebacks (off by default)."""
    return is_package_available("rich") and parse_flag_from_env("ACCELERATE_ENABLE_RICH", False)


def is_numpy_available(min_version: str = "1.25.0") -> bool:
    return _version_at_least("numpy", min_version)


def is_bnb_available(min_version: str | None = None) -> bool:
    """Whether `bitsandbytes` (at least ``min_version``, if given) is installed."""
    return _version_at_least("bitsandbytes", min_version)


def is_4bit_bnb_available() -> bool:
    """bitsandbytes 0.39.0+ (the first with 4-bit layers)."""
    return is_bnb_available("0.39.0")


def is_8bit_bnb_available() -> bool:
    """bitsandbytes 0.37.2+ (the first with usable 8-bit layers)."""
    return is_bnb_available("0.37.2")


def is_bitsandbytes_multi_backend_available() -> bool:
    """Whether the installed bitsandbytes runs on more than CUDA (its multi-backend build)."""
    if not is_bnb_available():
        return False
    import bitsandbytes

    return "multi_backend" in getattr(bitsandbytes, "features", set())


def is_torchao_available() -> bool:
    """torchao 0.6.1+ (the first with the float8 training API accelerate uses)."""
    return _version_at_least("torchao", "0.6.1")


def is_torchdata_stateful_dataloader_available() -> bool:
    """torchdata 0.8.0+ with ``torchdata.stateful_dataloader``."""
    return _version_at_least("torchdata", "0.8.0") and is_package_available("torchdata.stateful_dataloader")


def is_megatron_lm_available() -> bool:
    """Whether Megatron-LM's ``megatron.core`` is installed."""
    return is_package_available("megatron") and is_package_available("megatron.core")


def is_fp8_available() -> bool:
    """Whether a package that trains in fp8 (MS-AMP, Transformer Engine or torchao) is installed."""
    return is_msamp_available() or is_transformer_engine_available() or is_torchao_available()


def is_transformer_engine_mxfp8_available() -> bool:
    """Transformer Engine is installed and the GPU can do MXFP8 (compute capability 10.0+)."""
    if not is_transformer_engine_available():
        return False
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (10, 0)


def is_pippy_available() -> bool:
    """Whether ``torch.distributed.pipelining`` can be imported (torch 2.4+), which ``prepare_pippy`` uses.

    Answered from the installed files, without importing torch: the version, then the package itself
    (a torch built without distributed support leaves it out).
    """
    if not _version_at_least("torch", "2.4.0"):
        return False
    from pathlib import Path

    spec = importlib.util.find_spec("torch")
    roots = spec.submodule_search_locations if spec is not None else None
    return any((Path(root) / "distributed" / "pipelining" / "__init__.py").is_file() for root in roots or ())


def is_weights_only_available() -> bool:
    """Whether ``torch.load(weights_only=True)`` can load accelerate's checkpoints (torch 2.4+)."""
    return _version_at_least("torch", "2.4.0")


def is_torch_distributed_available() -> bool:
    import torch

    return bool(torch.distributed.is_available())


def is_xccl_available() -> bool:
    """Whether this torch build has the XCCL (Intel GPU) collective backend."""
    if not _version_at_least("torch", "2.7.0"):
        return False
    import torch.distributed

    if not torch.distributed.is_available():
        return False
    from torch.distributed import distributed_c10d

    probe = getattr(distributed_c10d, "is_xccl_available", None)
    return bool(probe()) if probe is not None else False


# ---- Devices. Each asks torch (or the vendor's torch extension) without initialising the device. ----


def is_cuda_available() -> bool:
    """Whether a CUDA GPU is usable, asked through NVML so that CUDA is not initialised (fork stays safe)."""
    import torch

    with patch_environment(PYTORCH_NVML_BASED_CUDA_CHECK="1"):
        return bool(torch.cuda.is_available())


def is_rocm_available() -> bool:
    """Whether torch was built for ROCm (AMD GPUs)."""
    import torch

    return getattr(torch.version, "hip", None) is not None


def is_mps_available(min_version: str = "1.12") -> bool:
    """Whether Apple's MPS backend is built and usable, on torch ``min_version`` or newer."""
    if not _version_at_least("torch", min_version):
        return False
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available() and mps.is_built())


@functools.cache
def is_torch_xla_available(check_is_tpu: bool = False, check_is_gpu: bool = False) -> bool:
    """Whether torch_xla is installed (and, when asked, whether its device is a TPU / a GPU)."""
    if not USE_TORCH_XLA or not is_package_available("torch_xla"):
        return False
    if not (check_is_tpu or check_is_gpu):
        return True
    import torch_xla.runtime as xr

    kind = str(xr.device_type())
    return (check_is_tpu and kind == "TPU") or (check_is_gpu and kind in ("GPU", "CUDA"))


def _vendor_device(extension: str, attribute: str, check_device: bool) -> bool:
    """A vendor accelerator exposed as ``torch.<attribute>`` once ``extension`` is imported."""
    if not is_package_available(extension):
        return False
    import torch

    importlib.import_module(extension)
    backend = getattr(torch, attribute, None)
    if backend is None or not backend.is_available():
        return False
    return not check_device or backend.device_count() > 0


def _vendor_probe(name: str, extension: str, attribute: str, what: str) -> Callable[..., bool]:
    """The probe ``name(check_device=False)`` for a vendor accelerator exposed as ``torch.<attribute>``."""

    def probe(check_device: bool = False) -> bool:
        return _vendor_device(extension, attribute, check_device)

    doc = f"Whether {what} are usable (``{extension}``); ``check_device`` also asks for at least one device."
    return functools.cache(_named(probe, name, doc))


is_npu_available = _vendor_probe("is_npu_available", "torch_npu", "npu", "Huawei Ascend NPUs")
is_mlu_available = _vendor_probe("is_mlu_available", "torch_mlu", "mlu", "Cambricon MLUs")
is_sdaa_available = _vendor_probe("is_sdaa_available", "torch_sdaa", "sdaa", "Tecorigin SDAA devices")
is_musa_available = _vendor_probe("is_musa_available", "torch_musa", "musa", "Moore Threads GPUs")
is_neuron_available = _vendor_probe(
    "is_neuron_available", "torch_neuronx", "neuron", "AWS Trainium/Inferentia chips"
)


@functools.cache
def is_hpu_available(init_hccl: bool = False) -> bool:
    """Intel Gaudi HPUs (``habana_frameworks``); ``init_hccl`` also loads its collective backend."""
    if not is_package_available("habana_frameworks"):
        return False
    import habana_frameworks.torch  # noqa: F401  (registers torch.hpu)
    import torch

    if init_hccl:
        import habana_frameworks.torch.distributed.hccl  # noqa: F401
    hpu = getattr(torch, "hpu", None)
    return bool(hpu is not None and hpu.is_available())


def is_habana_gaudi1() -> bool:
    """Whether the HPU here is a first-generation Gaudi (which has no fp16)."""
    if not is_hpu_available():
        return False
    import habana_frameworks.torch.utils.experimental as htexp

    return bool(htexp._get_device_type() == htexp.synDeviceType.synDeviceGaudi)


@functools.cache
def is_xpu_available(check_device: bool = False) -> bool:
    """Intel GPUs through torch's built-in ``torch.xpu``."""
    import torch

    xpu = getattr(torch, "xpu", None)
    if xpu is None or not xpu.is_available():
        return False
    return not check_device or xpu.device_count() > 0


def is_bf16_available(ignore_tpu: bool = False) -> bool:
    """Whether bf16 can be used here: always on CPU and TPU, on CUDA only where the GPU supports it."""
    if is_torch_xla_available(check_is_tpu=True):
        return not ignore_tpu
    if is_cuda_available():
        import torch

        return bool(torch.cuda.is_bf16_supported())
    return True


def is_fp16_available() -> bool:
    """Whether fp16 can be used here (everywhere but first-generation Gaudi)."""
    return not is_habana_gaudi1()


# ---- Requiring an optional dependency. ----


def require(module: str, pip_name: str | None = None, feature: str | None = None) -> ModuleType:
    """Imports an optional dependency, or raises ImportError with the pip command to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        what = f" for {feature}" if feature else ""
        raise ImportError(
            f"`{module}` is needed{what} but is not installed. Install it with: pip install {pip_name or module}"
        ) from exc


def _requires_package(module: str, probe: Callable[[], bool]) -> Callable[[F], F]:
    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not probe():
                raise ImportError(
                    f"`{func.__qualname__}` needs `{module}`, which is not installed. "
                    f"Install it with: pip install {module}"
                )
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def deepspeed_required(func: F) -> F:
    """Decorator: the function raises ImportError (with the pip command) when DeepSpeed is missing."""
    return _requires_package("deepspeed", is_deepspeed_available)(func)


def torchao_required(func: F) -> F:
    """Decorator: the function raises ImportError (with the pip command) when torchao is missing."""
    return _requires_package("torchao", is_torchao_available)(func)
