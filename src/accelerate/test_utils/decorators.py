"""Test decorators: ``skip``, ``slow``, ``run_first`` and every ``require_*``.

Each ``require_*`` answers from a probe (:mod:`accelerate.test_utils.probes`) when the decorator is
applied and, when the requirement is not met, marks the test skipped with a reason naming what is
missing. They work on unittest methods and classes and on plain pytest functions (pytest treats
``unittest.SkipTest`` as a skip).

A feature whose module this accelerate does not ship skips with that reason even when the
third-party package is installed (:func:`_feature` asks the probe): a test written for it would
otherwise fail here for a reason that is not the test's.

Example::

    from accelerate.test_utils import require_cuda, slow

    @require_cuda
    def test_on_gpu(): ...

    @slow  # runs only with RUN_SLOW=yes
    def test_long(): ...
"""

from __future__ import annotations

import functools
import os
import unittest
from collections.abc import Callable
from typing import Any, TypeVar, cast, overload

from accelerate.test_utils import probes

T = TypeVar("T")

_TRUE = {"1", "y", "yes", "t", "true", "on"}
_FALSE = {"0", "n", "no", "f", "false", "off"}


def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """Reads a yes/no flag from the environment variable ``key`` (``default`` when unset)."""
    value = os.environ.get(key)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(
        f"Environment variable {key}={value!r} is not a yes/no flag; set it to one of "
        f"{sorted(_TRUE)} or {sorted(_FALSE)}, or unset it."
    )


def _mark(test_case: T, condition: bool, reason: str) -> T:
    """``test_case``, skipped with ``reason`` unless ``condition``."""
    return _skip_unless(condition, reason)(test_case)


def _skip_unless(condition: bool, reason: str) -> Callable[[T], T]:
    def apply(test_case: T) -> T:
        plain_class = isinstance(test_case, type) and not issubclass(test_case, unittest.TestCase)
        if not condition and plain_class and probes.has_package("pytest"):
            # unittest's skip marks a class for unittest's runner only; pytest reads its own mark on a
            # plain test class.
            import pytest

            return cast(T, pytest.mark.skip(reason=reason)(test_case))
        # unittest's stub types the decorator for functions only; it also takes classes.
        skipper: Callable[[Any], Any] = unittest.skipUnless(condition, reason)
        return cast(T, skipper(test_case))

    return apply


# --- general ----------------------------------------------------------------------------------------
def skip(test_case: T) -> T:
    """Always skips the test."""
    return _mark(test_case, False, "test is marked to be skipped (accelerate.test_utils.skip)")


def slow(test_case: T) -> T:
    """Skips the test unless the environment variable ``RUN_SLOW`` is a true flag (``RUN_SLOW=yes``)."""
    return _mark(test_case, parse_flag_from_env("RUN_SLOW"), "slow test: set RUN_SLOW=yes to run it")


def run_first(test_case: T) -> T:
    """Asks pytest to run this test before the others (needs the ``pytest-order`` plugin).

    Without the plugin the test is returned unchanged: the order then is pytest's usual one.
    """
    if not probes.has_package("pytest_order"):
        return test_case
    import pytest

    return cast(T, pytest.mark.order(1)(test_case))


@overload
def require_torch_min_version(test_case: None = None, version: str | None = None) -> Callable[[T], T]: ...
@overload
def require_torch_min_version(test_case: T, version: str | None = None) -> T: ...
def require_torch_min_version(test_case: Any = None, version: str | None = None) -> Any:
    """Skips the test unless torch is at least ``version``; usable as ``@require_torch_min_version(version="2.4")``."""
    if version is None:
        raise TypeError(
            'require_torch_min_version needs a version, e.g. @require_torch_min_version(version="2.4")'
        )
    if test_case is None:
        return functools.partial(require_torch_min_version, version=version)
    import torch

    ok = probes.torch_version_at_least(version)
    return _mark(test_case, ok, f"test requires torch >= {version} (installed: {torch.__version__})")


# --- devices ----------------------------------------------------------------------------------------
def _device_is(device: str) -> bool:
    return probes.device_available(device)


def _count(device: str) -> int:
    return probes.device_count_of(device)


def require_cpu(test_case: T) -> T:
    """Runs the test only where the CPU is the test device (no accelerator is available)."""
    device = probes.accelerator_device()
    return _mark(test_case, device == "cpu", f"test requires a CPU-only run; this machine tests on {device}")


def require_non_cpu(test_case: T) -> T:
    """Runs the test only where an accelerator (CUDA, XPU, MPS, NPU, ...) is available."""
    ok = probes.accelerator_device() != "cpu"
    return _mark(
        test_case,
        ok,
        "test requires a hardware accelerator (CUDA, XPU, MPS, NPU, ...); only the CPU is available",
    )


def require_cuda(test_case: T) -> T:
    """Runs the test only where a CUDA GPU is available."""
    return _mark(
        test_case, _device_is("cuda"), "test requires a CUDA GPU (torch.cuda.is_available() is False)"
    )


def require_cuda_or_xpu(test_case: T) -> T:
    """Runs the test only where a CUDA GPU or an Intel XPU is available."""
    ok = _device_is("cuda") or _device_is("xpu")
    return _mark(test_case, ok, "test requires a CUDA GPU or an Intel XPU; neither is available")


def require_cuda_or_hpu(test_case: T) -> T:
    """Runs the test only where a CUDA GPU or a Habana HPU is available."""
    ok = _device_is("cuda") or _device_is("hpu")
    return _mark(test_case, ok, "test requires a CUDA GPU or a Habana HPU; neither is available")


def require_xpu(test_case: T) -> T:
    """Runs the test only where an Intel XPU is available."""
    return _mark(
        test_case, _device_is("xpu"), "test requires an Intel XPU (torch.xpu.is_available() is False)"
    )


def require_non_xpu(test_case: T) -> T:
    """Skips the test where an Intel XPU is available."""
    return _mark(test_case, not _device_is("xpu"), "test does not run on an Intel XPU")


def require_non_hpu(test_case: T) -> T:
    """Skips the test where a Habana HPU is available."""
    return _mark(test_case, not _device_is("hpu"), "test does not run on a Habana HPU")


def require_mps(test_case: T) -> T:
    """Runs the test only where Apple's MPS backend is available."""
    return _mark(
        test_case, _device_is("mps"), "test requires Apple MPS (torch.backends.mps.is_available() is False)"
    )


def _plugin_device(device: str, vendor: str, plugin: str) -> Callable[[T], T]:
    return _skip_unless(_device_is(device), f"test requires {vendor} ({device}); install {plugin} on a machine that has one")  # fmt: skip


def require_npu(test_case: T) -> T:
    """Runs the test only where an Ascend NPU is available."""
    return _plugin_device("npu", "an Ascend NPU", "torch_npu")(test_case)


def require_mlu(test_case: T) -> T:
    """Runs the test only where a Cambricon MLU is available."""
    return _plugin_device("mlu", "a Cambricon MLU", "torch_mlu")(test_case)


def require_musa(test_case: T) -> T:
    """Runs the test only where a Moore Threads MUSA GPU is available."""
    return _plugin_device("musa", "a Moore Threads MUSA GPU", "torch_musa")(test_case)


def require_sdaa(test_case: T) -> T:
    """Runs the test only where a Tecorigin SDAA is available."""
    return _plugin_device("sdaa", "a Tecorigin SDAA", "torch_sdaa")(test_case)


def require_neuron(test_case: T) -> T:
    """Runs the test only where AWS Neuron (``torch_neuronx``) is installed."""
    ok = probes.has_package("torch_neuronx")
    return _mark(test_case, ok, "test requires AWS Neuron (torch_neuronx is not installed)")


def require_tpu(test_case: T) -> T:
    """Runs the test only where torch_xla is installed and this accelerate has its XLA backend."""
    return _feature("accelerate.backends.xla", "TPU/XLA support", "torch_xla")(test_case)


def require_non_torch_xla(test_case: T) -> T:
    """Skips the test where torch_xla is installed."""
    return _mark(test_case, not probes.has_package("torch_xla"), "test does not run under torch_xla")


def require_single_device(test_case: T) -> T:
    """Runs the test only on a machine with exactly one accelerator device."""
    device = probes.accelerator_device()
    ok = device != "cpu" and _count(device) == 1
    return _mark(
        test_case,
        ok,
        f"test requires exactly one accelerator device (test device: {device}, count {_count(device)})",
    )


def require_multi_device(test_case: T) -> T:
    """Runs the test only on a machine with two or more accelerator devices of one type."""
    device = probes.accelerator_device()
    ok = device != "cpu" and _count(device) > 1
    return _mark(
        test_case,
        ok,
        f"test requires two or more accelerator devices (test device: {device}, count {_count(device)})",
    )


def require_single_gpu(test_case: T) -> T:
    """Runs the test only on a machine with exactly one CUDA GPU."""
    n = _count("cuda")
    return _mark(test_case, n == 1, f"test requires exactly one CUDA GPU ({n} visible)")


def require_multi_gpu(test_case: T) -> T:
    """Runs the test only on a machine with two or more CUDA GPUs."""
    n = _count("cuda")
    return _mark(test_case, n > 1, f"test requires two or more CUDA GPUs ({n} visible)")


def require_single_xpu(test_case: T) -> T:
    """Runs the test only on a machine with exactly one Intel XPU."""
    n = _count("xpu")
    return _mark(test_case, n == 1, f"test requires exactly one Intel XPU ({n} visible)")


def require_multi_xpu(test_case: T) -> T:
    """Runs the test only on a machine with two or more Intel XPUs."""
    n = _count("xpu")
    return _mark(test_case, n > 1, f"test requires two or more Intel XPUs ({n} visible)")


def require_multi_gpu_or_xpu(test_case: T) -> T:
    """Runs the test only on a machine with two or more CUDA GPUs or two or more Intel XPUs."""
    ok = _count("cuda") > 1 or _count("xpu") > 1
    return _mark(test_case, ok, "test requires two or more CUDA GPUs or Intel XPUs")


def require_fp16(test_case: T) -> T:
    """Runs the test where ``mixed_precision="fp16"`` works on the test device (CPU included)."""
    device = probes.accelerator_device()
    ok = device in ("cpu", "cuda", "xpu", "mps", "npu", "mlu", "musa", "sdaa", "hpu")
    return _mark(test_case, ok, f"test requires fp16 mixed precision, not supported on {device}")


# --- features this accelerate may not implement ----------------------------------------------------
def _feature(module: str, feature: str, *packages: str) -> Callable[[T], T]:
    """Skips unless this accelerate ships ``module`` and every one of ``packages`` is installed."""
    if not probes.implements(module):
        return _skip_unless(False, f"test requires {feature}, which this accelerate does not implement yet ({module})")  # fmt: skip
    missing = [p for p in packages if not probes.has_package(p)]
    return _skip_unless(not missing, f"test requires {feature}: install {' '.join(missing)}")


def require_deepspeed(test_case: T) -> T:
    """Runs the test where DeepSpeed is installed and supported by this accelerate."""
    return _feature("accelerate.backends.deepspeed", "DeepSpeed", "deepspeed")(test_case)


def require_fsdp2(test_case: T) -> T:
    """Runs the test where FSDP2 (torch >= 2.6) is supported by this accelerate."""
    if not probes.torch_version_at_least("2.6"):
        return _mark(test_case, False, "test requires FSDP2, which needs torch >= 2.6")
    return _feature("accelerate.backends.fsdp", "FSDP2")(test_case)


def require_tp(test_case: T) -> T:
    """Runs the test where tensor parallelism is supported by this accelerate (with transformers)."""
    return _feature("accelerate.backends.tp", "tensor parallelism", "transformers")(test_case)


def require_pippy(test_case: T) -> T:
    """Runs the test where pipeline-parallel inference (``accelerate.inference``) is available."""
    from accelerate.utils.imports import is_pippy_available  # reads installed files; imports no torch

    if not is_pippy_available():
        return _mark(test_case, False, "test requires torch.distributed.pipelining (torch >= 2.4 with distributed support)")  # fmt: skip
    return _feature("accelerate.inference", "pipeline-parallel inference")(test_case)


def require_fp8(test_case: T) -> T:
    """Runs the test where fp8 training is supported by this accelerate and a recipe package is installed."""
    decorator = _feature("accelerate.precision.fp8", "fp8 mixed precision")
    if not probes.implements("accelerate.precision.fp8"):
        return decorator(test_case)
    ok = any(probes.has_package(p) for p in ("transformer_engine", "torchao", "msamp"))
    return _mark(test_case, ok, "test requires fp8: install transformer_engine, torchao or msamp")


def require_transformer_engine(test_case: T) -> T:
    """Runs the test where Transformer Engine fp8 is installed and supported by this accelerate."""
    return _feature("accelerate.precision.fp8", "Transformer Engine fp8", "transformer_engine")(test_case)


def require_transformer_engine_mxfp8(test_case: T) -> T:
    """Runs the test where Transformer Engine MXFP8 works: the fp8 support plus a CUDA GPU of compute capability >= 10."""
    decorator = _feature("accelerate.precision.fp8", "Transformer Engine MXFP8", "transformer_engine")
    if probes.implements("accelerate.precision.fp8") and probes.has_package("transformer_engine"):
        import torch

        ok = _device_is("cuda") and torch.cuda.get_device_capability()[0] >= 10
        decorator = _skip_unless(ok, "test requires MXFP8: a CUDA GPU of compute capability 10.0 or newer")
    return decorator(test_case)


def require_torchao(test_case: T) -> T:
    """Runs the test where torchao is installed and this accelerate supports its fp8 recipe."""
    return _feature("accelerate.precision.fp8", "torchao fp8", "torchao")(test_case)


def require_bnb(test_case: T) -> T:
    """Runs the test where bitsandbytes is installed and this accelerate supports it."""
    return _feature("accelerate.big_modeling.quantization", "bitsandbytes quantization", "bitsandbytes")(
        test_case
    )


# --- third-party packages -------------------------------------------------------------------------
def _package(*packages: str, what: str | None = None) -> Callable[[T], T]:
    missing = [p for p in packages if not probes.has_package(p)]
    label = what or " and ".join(packages)
    return _skip_unless(not missing, f"test requires {label}: install {' '.join(missing)}")


def require_huggingface_suite(test_case: T) -> T:
    """Runs the test where transformers and datasets are installed."""
    return _package("transformers", "datasets")(test_case)


def require_transformers(test_case: T) -> T:
    """Runs the test where transformers is installed."""
    return _package("transformers")(test_case)


def require_datasets(test_case: T) -> T:
    """Runs the test where datasets is installed."""
    return _package("datasets")(test_case)


def require_peft(test_case: T) -> T:
    """Runs the test where peft is installed."""
    return _package("peft")(test_case)


def require_timm(test_case: T) -> T:
    """Runs the test where timm is installed."""
    return _package("timm")(test_case)


def require_torchvision(test_case: T) -> T:
    """Runs the test where torchvision is installed."""
    return _package("torchvision")(test_case)


def require_triton(test_case: T) -> T:
    """Runs the test where triton is installed."""
    return _package("triton")(test_case)


def require_schedulefree(test_case: T) -> T:
    """Runs the test where schedulefree is installed."""
    return _package("schedulefree")(test_case)


def require_pandas(test_case: T) -> T:
    """Runs the test where pandas is installed."""
    return _package("pandas")(test_case)


def require_matplotlib(test_case: T) -> T:
    """Runs the test where matplotlib is installed."""
    return _package("matplotlib")(test_case)


def require_import_timer(test_case: T) -> T:
    """Runs the test where the import-timer tooling (``import_timer``) is installed."""
    return _package("import_timer")(test_case)


def require_torchdata_stateful_dataloader(test_case: T) -> T:
    """Runs the test where torchdata's ``StatefulDataLoader`` is installed."""
    ok = probes.has_package("torchdata") and probes.has_package("torchdata.stateful_dataloader")
    return _mark(test_case, ok, "test requires torchdata's StatefulDataLoader: install torchdata>=0.8")


# --- trackers: the package, and this accelerate's tracker for it ----------------------------------
# tracker name -> (package to install, module of our tracker)
_TRACKERS: dict[str, tuple[str, str]] = {
    "tensorboard": ("tensorboard", "accelerate.tracking.tensorboard"),
    "wandb": ("wandb", "accelerate.tracking.wandb"),
    "mlflow": ("mlflow", "accelerate.tracking.mlflow"),
    "comet_ml": ("comet_ml", "accelerate.tracking.comet_ml"),
    "aim": ("aim", "accelerate.tracking.aim"),
    "clearml": ("clearml", "accelerate.tracking.clearml"),
    "dvclive": ("dvclive", "accelerate.tracking.dvclive"),
    "swanlab": ("swanlab", "accelerate.tracking.swanlab"),
    "trackio": ("trackio", "accelerate.tracking.trackio"),
}


def _tracker_usable(name: str) -> bool:
    package, module = _TRACKERS[name]
    return probes.implements(module) and probes.has_package(package)


def _tracker(name: str) -> Callable[[T], T]:
    package, module = _TRACKERS[name]
    if not probes.implements(module):
        return _skip_unless(False, f"test requires the {name} tracker, which this accelerate does not implement yet ({module})")  # fmt: skip
    return _skip_unless(probes.has_package(package), f"test requires the {name} tracker: install {package}")


def require_tensorboard(test_case: T) -> T:
    """Runs the test where the TensorBoard tracker works."""
    return _tracker("tensorboard")(test_case)


def require_wandb(test_case: T) -> T:
    """Runs the test where the Weights & Biases tracker works."""
    return _tracker("wandb")(test_case)


def require_mlflow(test_case: T) -> T:
    """Runs the test where the MLflow tracker works."""
    return _tracker("mlflow")(test_case)


def require_comet_ml(test_case: T) -> T:
    """Runs the test where the Comet ML tracker works."""
    return _tracker("comet_ml")(test_case)


def require_aim(test_case: T) -> T:
    """Runs the test where the Aim tracker works."""
    return _tracker("aim")(test_case)


def require_clearml(test_case: T) -> T:
    """Runs the test where the ClearML tracker works."""
    return _tracker("clearml")(test_case)


def require_dvclive(test_case: T) -> T:
    """Runs the test where the DVCLive tracker works."""
    return _tracker("dvclive")(test_case)


def require_swanlab(test_case: T) -> T:
    """Runs the test where the SwanLab tracker works."""
    return _tracker("swanlab")(test_case)


def require_trackio(test_case: T) -> T:
    """Runs the test where the Trackio tracker works."""
    return _tracker("trackio")(test_case)


def require_trackers(test_case: T) -> T:
    """Runs the test where at least one experiment tracker works."""
    usable = [name for name in _TRACKERS if _tracker_usable(name)]
    reason = "test requires an experiment tracker: install tensorboard, wandb or mlflow"
    return _mark(test_case, bool(usable), reason)
