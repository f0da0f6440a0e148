"""`accelerate.utils`: the public helper namespace. Names load on first use (PEP 562)."""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_LAZY: dict[str, str] = {}


def _register(module: str, *names: str) -> None:
    for name in names:
        _LAZY[name] = module


_register(
    "accelerate.utils.dataclasses",
    "AutocastKwargs", "DataLoaderConfiguration", "DDPCommunicationHookType", "DistributedDataParallelKwargs",
    "DynamoPlugin", "GradientAccumulationPlugin", "GradScalerKwargs", "InitProcessGroupKwargs", "KwargsHandler",
    "ProjectConfiguration", "DeepSpeedPlugin", "FullyShardedDataParallelPlugin", "MegatronLMPlugin",
)  # fmt: skip
_register(
    "accelerate.utils.collectives",
    "CannotPadNestedTensorWarning", "DistributedOperationException", "broadcast", "broadcast_object_list",
    "gather", "gather_object", "pad_across_processes", "reduce", "verify_operation",
)  # fmt: skip
_register(
    "accelerate.utils.tree",
    "concatenate", "find_batch_size", "get_data_structure", "honor_type", "ignorant_find_batch_size",
    "is_namedtuple", "is_torch_tensor", "listify", "merge_dicts", "pad_input_tensors", "recursively_apply",
    "send_to_device", "slice_tensors",
)  # fmt: skip
_register(
    "accelerate.utils.tensor_info",
    "TensorInformation", "find_device", "initialize_tensors", "is_tensor_information",
)  # fmt: skip
_register("accelerate.utils.owned_tensor", "copy_tensor_to_devices")
_register("accelerate.utils.fp32_outputs", "convert_outputs_to_fp32", "convert_to_fp32")
_register("accelerate.utils.gathered_parameters", "GatheredParameters")
_register(
    "accelerate.utils.regional_compilation",
    "compile_regions", "compile_regions_deepspeed", "compile_regions_fsdp2", "has_compiled_regions",
    "is_compiled_module",
)  # fmt: skip
_register(
    "accelerate.utils.module_inspection",
    "get_model_tp_size", "get_module_children_bottom_up", "model_has_dtensor", "recursive_getattr",
)  # fmt: skip
_register("accelerate.utils.ports", "is_port_in_use")
_register("accelerate.utils.text", "convert_bytes", "get_pretty_name")
_register("accelerate.utils.kernel_check", "check_os_kernel")
_register("accelerate.checkpointing.single_file", "clean_state_dict_for_safetensors", "load", "save")
_register("accelerate.utils.other", "wait_for_everyone")
_register("accelerate.utils.errors", "NotAvailableYetError")
_register("accelerate.utils.random", "set_seed", "synchronize_rng_state", "synchronize_rng_states")
_register(
    "accelerate.utils.memory", "find_executable_batch_size", "release_memory", "clear_device_cache",
    "should_reduce_batch_size",
)  # fmt: skip
_register(
    "accelerate.utils.imports", "is_bf16_available", "is_cuda_available", "is_deepspeed_available",
    "is_mlflow_available", "is_tensorboard_available", "is_torch_xla_available", "is_wandb_available",
)  # fmt: skip
_register("accelerate.state", "DistributedType", "PrecisionType", "ComputeEnvironment")
_register("accelerate.utils.modeling", "extract_model_from_parallel")
_register("accelerate.checkpointing.model_loading", "load_checkpoint_in_model")
_register(
    "accelerate.big_modeling",
    "init_empty_weights",
    "init_on_device",
    "load_checkpoint_and_dispatch",
    "dispatch_model",
    "infer_auto_device_map",
)

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
