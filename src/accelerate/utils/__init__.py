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
    "DistributedOperationException", "broadcast", "broadcast_object_list", "gather", "gather_object",
    "pad_across_processes", "reduce", "verify_operation",
)  # fmt: skip
_register(
    "accelerate.utils.tree",
    "concatenate", "find_batch_size", "get_data_structure", "honor_type", "is_namedtuple", "is_torch_tensor",
    "listify", "recursively_apply", "send_to_device", "slice_tensors",
)  # fmt: skip
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
_register(
    "accelerate.utils.modeling",
    "align_module_device", "calculate_maximum_sizes", "check_device_map", "check_tied_parameters_in_config",
    "check_tied_parameters_on_same_device", "compute_module_sizes", "convert_file_size_to_int", "dtype_byte_size",
    "find_tied_parameters", "get_balanced_memory", "get_max_layer_size", "get_max_memory", "has_offloaded_params",
    "id_tensor_storage", "load_checkpoint_in_model", "load_offloaded_weights", "load_state_dict",
    "named_module_tensors", "retie_parameters", "set_module_tensor_to_device", "CustomDtype", "clean_device_map",
    "infer_auto_device_map",
)  # fmt: skip
_register(
    "accelerate.utils.offload",
    "OffloadedWeightsLoader", "PrefixedDataset", "extract_submodules_state_dict", "load_offloaded_weight",
    "offload_state_dict", "offload_weight", "save_offload_index",
)  # fmt: skip
_register(
    "accelerate.big_modeling",
    "init_empty_weights",
    "init_on_device",
    "load_checkpoint_and_dispatch",
    "dispatch_model",
    "cpu_offload",
    "cpu_offload_with_hook",
    "disk_offload",
)

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
