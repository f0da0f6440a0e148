"""Upstream's ``accelerate.test_utils.testing``: one import for every test helper.

The helpers live in small modules by topic; this module only gathers them:

- :mod:`~accelerate.test_utils.decorators`: ``skip``, ``slow``, ``run_first``, ``require_*``,
  ``parse_flag_from_env``
- :mod:`~accelerate.test_utils.devices`: ``torch_device``, ``device_count``, ``get_backend``,
  ``memory_allocated_func``
- :mod:`~accelerate.test_utils.processes`: ``execute_subprocess_async``, ``run_command``,
  ``get_launch_command``, ``DEFAULT_LAUNCH_COMMAND``, ports and paths
- :mod:`~accelerate.test_utils.cases`: ``AccelerateTestCase``, ``TempDirTestCase``, ``MockingTestCase``
- :mod:`~accelerate.test_utils.assertions`: ``are_the_same_tensors``, ``assert_exception``,
  ``capture_call_output``
"""

from __future__ import annotations

from accelerate.test_utils.assertions import are_the_same_tensors, assert_exception, capture_call_output
from accelerate.test_utils.cases import AccelerateTestCase, MockingTestCase, TempDirTestCase
from accelerate.test_utils.decorators import (
    parse_flag_from_env,
    require_aim,
    require_bnb,
    require_clearml,
    require_comet_ml,
    require_cpu,
    require_cuda,
    require_cuda_or_hpu,
    require_cuda_or_xpu,
    require_datasets,
    require_deepspeed,
    require_dvclive,
    require_fp8,
    require_fp16,
    require_fsdp2,
    require_huggingface_suite,
    require_import_timer,
    require_matplotlib,
    require_mlflow,
    require_mlu,
    require_mps,
    require_multi_device,
    require_multi_gpu,
    require_multi_gpu_or_xpu,
    require_multi_xpu,
    require_musa,
    require_neuron,
    require_non_cpu,
    require_non_hpu,
    require_non_torch_xla,
    require_non_xpu,
    require_npu,
    require_pandas,
    require_peft,
    require_pippy,
    require_schedulefree,
    require_sdaa,
    require_single_device,
    require_single_gpu,
    require_single_xpu,
    require_swanlab,
    require_tensorboard,
    require_timm,
    require_torch_min_version,
    require_torchao,
    require_torchdata_stateful_dataloader,
    require_torchvision,
    require_tp,
    require_tpu,
    require_trackers,
    require_trackio,
    require_transformer_engine,
    require_transformer_engine_mxfp8,
    require_transformers,
    require_triton,
    require_wandb,
    require_xpu,
    run_first,
    skip,
    slow,
)
from accelerate.test_utils.devices import device_count, get_backend, memory_allocated_func, torch_device
from accelerate.test_utils.processes import (
    DEFAULT_LAUNCH_COMMAND,
    SubprocessCallException,
    SubprocessResult,
    execute_subprocess_async,
    get_launch_command,
    get_torch_dist_unique_port,
    path_in_accelerate_package,
    pytest_xdist_worker_id,
    run_command,
)

__all__ = [
    "DEFAULT_LAUNCH_COMMAND", "AccelerateTestCase", "MockingTestCase", "SubprocessCallException",
    "SubprocessResult", "TempDirTestCase", "are_the_same_tensors", "assert_exception", "capture_call_output",
    "device_count", "execute_subprocess_async", "get_backend", "get_launch_command",
    "get_torch_dist_unique_port", "memory_allocated_func", "parse_flag_from_env", "path_in_accelerate_package",
    "pytest_xdist_worker_id", "require_aim", "require_bnb", "require_clearml", "require_comet_ml",
    "require_cpu", "require_cuda", "require_cuda_or_hpu", "require_cuda_or_xpu", "require_datasets",
    "require_deepspeed", "require_dvclive", "require_fp8", "require_fp16", "require_fsdp2",
    "require_huggingface_suite", "require_import_timer", "require_matplotlib", "require_mlflow", "require_mlu",
    "require_mps", "require_multi_device", "require_multi_gpu", "require_multi_gpu_or_xpu", "require_multi_xpu",
    "require_musa", "require_neuron", "require_non_cpu", "require_non_hpu", "require_non_torch_xla",
    "require_non_xpu", "require_npu", "require_pandas", "require_peft", "require_pippy", "require_schedulefree",
    "require_sdaa", "require_single_device", "require_single_gpu", "require_single_xpu", "require_swanlab",
    "require_tensorboard", "require_timm", "require_torch_min_version", "require_torchao",
    "require_torchdata_stateful_dataloader", "require_torchvision", "require_tp", "require_tpu",
    "require_trackers", "require_trackio", "require_transformer_engine", "require_transformer_engine_mxfp8",
    "require_transformers", "require_triton", "require_wandb", "require_xpu", "run_command", "run_first",
    "skip", "slow", "torch_device",
]  # fmt: skip
