"""Configuration dataclasses users pass to the Accelerator: kwargs handlers and plugins, and (re-exported
from :mod:`accelerate.utils.enums`) the mixed-precision vocabulary.

Pure data: nothing here reads ``os.environ`` or imports torch at module import.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any, Literal

# The small enums upstream keeps in this module live in utils/enums.py; re-exported here (`name as
# name` tells type checkers so). Our own modules import them from utils/enums.py. So does the
# mixed-precision vocabulary: the launcher reads it there without building every class below.
from accelerate.utils.enums import AVAILABLE_MIXED_PRECISION_MODES as AVAILABLE_MIXED_PRECISION_MODES
from accelerate.utils.enums import MIXED_PRECISION_MODES as MIXED_PRECISION_MODES
from accelerate.utils.enums import BaseEnum as BaseEnum
from accelerate.utils.enums import DynamoBackend as DynamoBackend
from accelerate.utils.enums import EnumWithContains as EnumWithContains
from accelerate.utils.enums import LoggerType as LoggerType
from accelerate.utils.enums import PrecisionType as PrecisionType
from accelerate.utils.enums import RNGType as RNGType
from accelerate.utils.enums import SageMakerDistributedType as SageMakerDistributedType
from accelerate.utils.enums import check_mixed_precision as check_mixed_precision


class KwargsHandler:
    """Base of the ``*Kwargs`` handlers: ``to_kwargs()`` returns only the fields changed from default."""

    def to_kwargs(self) -> dict[str, Any]:
        default = self.__class__()
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)  # type: ignore[arg-type]
            if getattr(self, f.name) != getattr(default, f.name)
        }

    def to_dict(self, ignore_keys: tuple[str, ...] = ()) -> dict[str, Any]:
        """Every field and its value (defaults included), less ``ignore_keys``."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)  # type: ignore[arg-type]
            if f.name not in ignore_keys
        }


class DDPCommunicationHookType(str, enum.Enum):
    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Arguments forwarded to ``torch.nn.parallel.DistributedDataParallel``.

    Example:
        >>> Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
    """

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    comm_hook: DDPCommunicationHookType | str = DDPCommunicationHookType.NO
    comm_wrapper: DDPCommunicationHookType | str = DDPCommunicationHookType.NO
    comm_state_option: dict[str, Any] = field(default_factory=dict)

    def ddp_kwargs(self) -> dict[str, Any]:
        """Only the arguments DistributedDataParallel itself takes."""
        hook_fields = {"comm_hook", "comm_wrapper", "comm_state_option", "check_reduction"}
        return {k: v for k, v in self.to_kwargs().items() if k not in hook_fields}

    def to_dict(
        self, ignore_keys: tuple[str, ...] = ("comm_hook", "comm_wrapper", "comm_state_option")
    ) -> dict[str, Any]:
        return super().to_dict(ignore_keys=ignore_keys)

    def register_comm_hook(self, model: Any) -> None:
        """Registers the chosen communication hook (and wrapper) on a DistributedDataParallel ``model``."""
        ddp = model
        hook_type = DDPCommunicationHookType(self.comm_hook)
        wrapper_type = DDPCommunicationHookType(self.comm_wrapper)
        if hook_type is DDPCommunicationHookType.NO:
            if wrapper_type is not DDPCommunicationHookType.NO:
                raise ValueError(
                    f"DistributedDataParallelKwargs(comm_wrapper={wrapper_type.value!r}) wraps a PowerSGD hook; "
                    "set comm_hook='power_sgd' or 'batched_power_sgd' too, or drop comm_wrapper."
                )
            return
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

        if hook_type in (DDPCommunicationHookType.FP16, DDPCommunicationHookType.BF16):
            if wrapper_type is not DDPCommunicationHookType.NO:
                raise ValueError(
                    f"DistributedDataParallelKwargs(comm_wrapper={wrapper_type.value!r}) only applies to the "
                    f"PowerSGD hooks; comm_hook={hook_type.value!r} already compresses. Drop comm_wrapper."
                )
            hook: Any = (
                default_hooks.fp16_compress_hook
                if hook_type is DDPCommunicationHookType.FP16
                else default_hooks.bf16_compress_hook
            )
            ddp.register_comm_hook(state=None, hook=hook)
            return
        state = powerSGD_hook.PowerSGDState(process_group=None, **self.comm_state_option)
        hook = (
            powerSGD_hook.powerSGD_hook
            if hook_type is DDPCommunicationHookType.POWER_SGD
            else powerSGD_hook.batched_powerSGD_hook
        )
        if wrapper_type is DDPCommunicationHookType.FP16:
            hook = default_hooks.fp16_compress_wrapper(hook)
        elif wrapper_type is DDPCommunicationHookType.BF16:
            hook = default_hooks.bf16_compress_wrapper(hook)
        elif wrapper_type is not DDPCommunicationHookType.NO:
            raise ValueError(
                f"DistributedDataParallelKwargs(comm_wrapper={wrapper_type.value!r}) must be 'no', 'fp16' or 'bf16'."
            )
        ddp.register_comm_hook(state=state, hook=hook)


@dataclass
class GradScalerKwargs(KwargsHandler):
    """Arguments forwarded to ``torch.amp.GradScaler`` (fp16 only)."""

    init_scale: float = 65536.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    enabled: bool = True


@dataclass
class AutocastKwargs(KwargsHandler):
    """Arguments forwarded to ``torch.autocast``."""

    enabled: bool = True
    cache_enabled: bool | None = None


@dataclass
class InitProcessGroupKwargs(KwargsHandler):
    """Arguments forwarded to ``torch.distributed.init_process_group``."""

    backend: str | None = None
    init_method: str | None = None
    timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if self.timeout is not None and not isinstance(self.timeout, timedelta):
            raise TypeError(
                f"InitProcessGroupKwargs(timeout=...) must be a datetime.timedelta, got {type(self.timeout).__name__}"
            )


@dataclass
class GradientAccumulationPlugin(KwargsHandler):
    """How gradient accumulation behaves.

    Args:
        num_steps: micro-steps per optimizer step.
        adjust_scheduler: scale scheduler steps so the schedule is written in optimizer steps.
        sync_with_dataloader: force a sync step at the end of the dataloader.
        sync_each_batch: all-reduce on every micro-step (saves memory, costs bandwidth).
        adjust_for_world_size: keep the global batch of an elastic run: on ``N`` processes accumulate
            ``num_steps * reference_world_size / N`` micro-steps (a whole number). Off (default): the
            per-process batch and ``num_steps`` stay, and the global batch shrinks with the world.
        reference_world_size: the world size ``num_steps`` is for; default: the largest group the
            launch allows (``--nnodes MIN:MAX``).
    """

    num_steps: int = 1
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False
    adjust_for_world_size: bool = False
    reference_world_size: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.num_steps, int) or self.num_steps < 1:
            raise ValueError(
                f"GradientAccumulationPlugin(num_steps={self.num_steps!r}) must be an integer >= 1"
            )
        if self.reference_world_size is not None and not (
            0 < self.reference_world_size == int(self.reference_world_size)
        ):
            raise ValueError(
                f"GradientAccumulationPlugin(reference_world_size={self.reference_world_size!r}) must be an "
                "integer >= 1 (the number of processes num_steps is written for), or None"
            )


@dataclass
class DataLoaderConfiguration:
    """How ``prepare`` shards and iterates dataloaders.

    Args:
        split_batches: each process takes a slice of every batch instead of whole batches.
        dispatch_batches: process 0 reads the data and sends each process its slice.
        even_batches: complete the last round by cycling to the start so every process gets a batch.
        use_seedable_sampler: shuffle with a permutation that depends only on (seed, epoch) instead of
            PyTorch's order (the default, which resumes exactly too).
        non_blocking: copy batches to the device asynchronously (needs pin_memory to help).
        use_stateful_dataloader: record the loader position for exact resumption.
        data_seed: seed of the seedable sampler's generator.
    """

    split_batches: bool = False
    dispatch_batches: bool | None = None
    even_batches: bool = True
    use_seedable_sampler: bool = False
    non_blocking: bool = False
    use_stateful_dataloader: bool = True
    data_seed: int | None = None


@dataclass
class ProjectConfiguration:
    """Where a project writes checkpoints and logs.

    Args:
        project_dir: root of the run's files.
        logging_dir: where trackers write (default: project_dir).
        automatic_checkpoint_naming: save to ``project_dir/checkpoints/checkpoint_{iteration}``.
        total_limit: keep at most this many checkpoints (the oldest is removed after a new one commits).
        iteration: the next automatic checkpoint number.
        save_on_each_node: write on every node's local main process instead of the global main only.
    """

    project_dir: str | None = None
    logging_dir: str | None = None
    automatic_checkpoint_naming: bool = False
    total_limit: int | None = None
    iteration: int = 0
    save_on_each_node: bool = False

    def set_directories(self, project_dir: str | None = None) -> None:
        self.project_dir = project_dir
        if self.logging_dir is None:
            self.logging_dir = project_dir

    def __post_init__(self) -> None:
        self.set_directories(self.project_dir)
        if self.total_limit is not None and self.total_limit < 1:
            raise ValueError(f"ProjectConfiguration(total_limit={self.total_limit}) must be >= 1 or None")


ProfilerActivity = Literal["cpu", "xpu", "mtia", "cuda", "hpu"]


@dataclass
class ProfileKwargs(KwargsHandler):
    """Settings of ``torch.profiler.profile`` for :meth:`Accelerator.profile`.

    Args:
        activities: what to record: any of ``"cpu"``, ``"cuda"``, ``"xpu"``, ``"mtia"``, ``"hpu"``
            (default: what torch records by default).
        schedule_option: a ``torch.profiler.schedule``'s arguments (``wait``, ``warmup``, ``active``,
            ``repeat``, ``skip_first``); call ``prof.step()`` once per step to advance it.
        on_trace_ready: called with the profiler when a scheduled cycle (or the block) ends.
        record_shapes, profile_memory, with_stack, with_flops, with_modules: passed through.
        output_trace_dir: where each process writes its Chrome trace, ``profile_{rank}.json``.

    Example:
        >>> with accelerator.profile(ProfileKwargs(activities=["cpu"], record_shapes=True)) as prof:
        ...     model(x)
        >>> print(prof.key_averages().table())
    """

    activities: list[ProfilerActivity] | None = None
    schedule_option: dict[str, int] | None = None
    on_trace_ready: Any = None
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    with_modules: bool = False
    output_trace_dir: str | None = None

    def __post_init__(self) -> None:
        allowed = ("cpu", "xpu", "mtia", "cuda", "hpu")
        for activity in self.activities or ():
            if activity not in allowed:
                raise ValueError(
                    f"ProfileKwargs(activities=[..., {activity!r}, ...]): each activity must be one of "
                    f"{', '.join(map(repr, allowed))}."
                )
        schedule_keys = {"wait", "warmup", "active", "repeat", "skip_first"}
        unknown = set(self.schedule_option or {}) - schedule_keys
        if unknown:
            raise ValueError(
                f"ProfileKwargs(schedule_option=...) has unknown keys {sorted(unknown)}; use "
                f"{sorted(schedule_keys)} (torch.profiler.schedule's arguments)."
            )

    def build(self) -> Any:
        """A ``torch.profiler.profile`` object with these settings (enter it to record)."""
        import torch.profiler as profiler

        kwargs: dict[str, Any] = {
            "record_shapes": self.record_shapes,
            "profile_memory": self.profile_memory,
            "with_stack": self.with_stack,
            "with_flops": self.with_flops,
            "with_modules": self.with_modules,
        }
        if self.activities is not None:
            kwargs["activities"] = [
                getattr(profiler.ProfilerActivity, name.upper()) for name in self.activities
            ]
        if self.schedule_option is not None:
            kwargs["schedule"] = profiler.schedule(**self.schedule_option)
        if self.on_trace_ready is not None:
            kwargs["on_trace_ready"] = self.on_trace_ready
        return profiler.profile(**kwargs)


def mixed_precision_dtype(mode: object) -> Any:
    """The dtype a mixed-precision mode casts parameters and compute to: ``torch.float16`` / ``torch.bfloat16``,
    None for ``"no"`` and ``"fp8"`` (fp8 keeps fp32 parameters; its layers cast themselves, see
    ``accelerate.precision.fp8``).

    The one mode -> dtype table (Precision's autocast, the FSDP plugin's policy); torch is imported
    only when this is called, so the CLI can keep importing this module at start-up.
    """
    import torch

    mode = check_mixed_precision(mode)
    return {PrecisionType.FP16.value: torch.float16, PrecisionType.BF16.value: torch.bfloat16}.get(mode)


_HANDLER_TYPES: tuple[type, ...] = (
    ProfileKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    AutocastKwargs,
    InitProcessGroupKwargs,
)


def _is_fault_tolerance(handler: Any) -> bool:
    # Its own module (utils/fault_tolerance.py) imports this one for KwargsHandler; an instance exists
    # only once that module is loaded, so a run without one never loads it.
    module = sys.modules.get("accelerate.utils.fault_tolerance")
    return module is not None and type(handler) is module.FaultToleranceKwargs


def collect_kwargs_handlers(handlers: Any) -> dict[type, Any]:
    """Validates ``Accelerator(kwargs_handlers=...)``: known types only, each at most once."""
    found: dict[type, Any] = {}
    for handler in handlers or ():
        kind = type(handler)
        # Hardware-only configs (Megatron-LM) say why they cannot run; connect() takes fp8 recipes out first.
        refuse = getattr(handler, "refuse_use", None)
        if refuse is not None:
            raise refuse("Accelerator(kwargs_handlers=...)")
        if kind not in _HANDLER_TYPES and not _is_fault_tolerance(handler):
            known = ", ".join(t.__name__ for t in _HANDLER_TYPES)
            raise TypeError(
                f"kwargs_handlers got an object of type {kind.__name__}, which is not a kwargs handler. "
                f"Use instances of: {known}."
            )
        if kind in found:
            raise ValueError(
                f"kwargs_handlers holds two {kind.__name__} objects ({found[kind]} and {handler}); "
                "merge them into one."
            )
        found[kind] = handler
    return found


# Defined elsewhere (the process state and big-model sizes import torch; the hardware-only configs
# are many dataclasses nobody needs at start-up); loaded on first use.
_ELSEWHERE = {
    # It fills unset fields from the launcher's ACCELERATE_DYNAMO_* variables (the env contract, config/).
    "TorchDynamoPlugin": "accelerate.config.dynamo",
    "DynamoPlugin": "accelerate.config.dynamo",
    # Hardware-only configuration objects (Megatron-LM) and the fp8 recipes: their own modules,
    # loaded only when one is asked for.
    "MODEL_CONFIGS_TO_MEGATRON_PARSERS": "accelerate.utils.hardware_dataclasses",
    "AmaxComputeAlgorithm": "accelerate.precision.fp8.recipes",
    "AORecipeKwargs": "accelerate.precision.fp8.recipes",
    "Backend": "accelerate.precision.fp8.recipes",
    "BnbQuantizationConfig": "accelerate.big_modeling.quantization.config",
    "FP8BackendType": "accelerate.precision.fp8.recipes",
    "FP8Format": "accelerate.precision.fp8.recipes",
    "FP8RecipeKwargs": "accelerate.precision.fp8.recipes",
    "MegatronLMPlugin": "accelerate.utils.hardware_dataclasses",
    "MSAMPRecipeKwargs": "accelerate.precision.fp8.recipes",
    "OptLevel": "accelerate.precision.fp8.recipes",
    "TERecipeKwargs": "accelerate.precision.fp8.recipes",
    "add_model_config_to_megatron_parser": "accelerate.utils.hardware_dataclasses",
    "parse_bert_config": "accelerate.utils.hardware_dataclasses",
    "parse_glm4_moe_config": "accelerate.utils.hardware_dataclasses",
    "parse_gpt2_config": "accelerate.utils.hardware_dataclasses",
    "parse_llama_config": "accelerate.utils.hardware_dataclasses",
    "parse_t5_config": "accelerate.utils.hardware_dataclasses",
    "FullyShardedDataParallelPlugin": "accelerate.backends.fsdp.plugin",
    "TorchTensorParallelConfig": "accelerate.utils.parallel_configs",
    "TorchContextParallelConfig": "accelerate.utils.parallel_configs",
    "DeepSpeedSequenceParallelConfig": "accelerate.utils.parallel_configs",
    "DeepSpeedPlugin": "accelerate.backends.deepspeed.plugin",
    "TorchTensorParallelPlugin": "accelerate.utils.parallel_configs",
    "get_module_class_from_name": "accelerate.utils.parallel_configs",
    "DistributedType": "accelerate.state.distributed_type",
    "ComputeEnvironment": "accelerate.state.distributed_type",
    "CustomDtype": "accelerate.big_modeling.sizes",
    "TensorInformation": "accelerate.utils.tensor_info",
}


def __getattr__(name: str) -> Any:
    module = _ELSEWHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
