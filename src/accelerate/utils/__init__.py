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
    "accelerate.collectives.operations",
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
_register("accelerate.collectives.owned_tensor", "copy_tensor_to_devices")
_register("accelerate.utils.fault_tolerance", "FaultToleranceKwargs")  # our addition (torchft replicas)
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
_register("accelerate.state", "wait_for_everyone")
_register("accelerate.utils.errors", "NotAvailableYetError")
_register("accelerate.collectives.rng", "set_seed", "synchronize_rng_state", "synchronize_rng_states")
_register("accelerate.utils.memory", "release_memory", "clear_device_cache", "should_reduce_batch_size")
_register("accelerate.state.batch_search", "find_executable_batch_size")
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

# Probes, constants, environment helpers and the hardware-only faces (issue 10).
_register(
    "accelerate.utils.imports",
    "deepspeed_required", "is_4bit_bnb_available", "is_8bit_bnb_available", "is_aim_available",
    "is_amdsmi_available", "is_bitsandbytes_multi_backend_available", "is_bnb_available", "is_boto3_available",
    "is_clearml_available", "is_comet_ml_available", "is_datasets_available", "is_dvclive_available",
    "is_fp16_available", "is_fp8_available", "is_habana_gaudi1", "is_hpu_available", "is_import_timer_available",
    "is_lomo_available", "is_matplotlib_available", "is_megatron_lm_available", "is_mlu_available",
    "is_mps_available", "is_msamp_available", "is_musa_available", "is_neuron_available", "is_npu_available",
    "is_pandas_available", "is_peft_available", "is_pippy_available", "is_pynvml_available",
    "is_pytest_available", "is_rich_available", "is_rocm_available", "is_sagemaker_available",
    "is_schedulefree_available", "is_sdaa_available", "is_swanlab_available", "is_timm_available",
    "is_torchao_available", "is_torchdata_available", "is_torchdata_stateful_dataloader_available",
    "is_torchvision_available", "is_trackio_available", "is_transformer_engine_available",
    "is_transformer_engine_mxfp8_available", "is_transformers_available", "is_triton_available",
    "is_weights_only_available", "is_xccl_available", "is_xpu_available", "torchao_required",
)  # fmt: skip
_register(
    "accelerate.utils.constants",
    "MITA_PROFILING_AVAILABLE_PYTORCH_VERSION", "MODEL_NAME", "OPTIMIZER_NAME", "PROFILE_PATTERN_NAME",
    "RNG_STATE_NAME", "SAFE_MODEL_NAME", "SAFE_WEIGHTS_INDEX_NAME", "SAFE_WEIGHTS_NAME", "SAFE_WEIGHTS_PATTERN_NAME",
    "SAMPLER_NAME", "SCALER_NAME", "SCHEDULER_NAME", "TORCH_DISTRIBUTED_OPERATION_TYPES", "TORCH_LAUNCH_PARAMS",
    "WEIGHTS_INDEX_NAME", "WEIGHTS_NAME", "WEIGHTS_PATTERN_NAME", "XPU_PROFILING_AVAILABLE_PYTORCH_VERSION",
)  # fmt: skip
_register(
    "accelerate.utils.environment",
    "are_libraries_initialized", "check_cuda_fp8_capability", "check_cuda_p2p_ib_support", "clear_environment",
    "convert_dict_to_env_variables", "get_cpu_distributed_information", "get_current_device_type",
    "get_gpu_info", "get_int_from_env", "parse_choice_from_env", "parse_flag_from_env", "patch_environment",
    "purge_accelerate_environment", "set_numa_affinity", "str_to_bool",
)  # fmt: skip
_register("accelerate.utils.versions", "compare_versions", "is_torch_version")
# Bound now, not on first use: the function shares its face module's name, and a lazy entry would be
# shadowed by that submodule once anything imports `accelerate.utils.tqdm` directly. Loading the face
# first settles the attribute; both it and the function's home (accelerate.progress) are import-free.
_register("accelerate.progress", "tqdm")
from accelerate.utils.tqdm import tqdm  # noqa: E402, F401, I001

_register(
    "accelerate.utils.dataclasses",
    "AORecipeKwargs", "BnbQuantizationConfig", "FP8RecipeKwargs", "MSAMPRecipeKwargs", "TERecipeKwargs",
    "add_model_config_to_megatron_parser",
)  # fmt: skip
_register(
    "accelerate.backends.megatron_lm",
    "AbstractTrainStep", "BertTrainStep", "GPTTrainStep", "MegatronEngine", "MegatronLMDummyDataLoader",
    "MegatronLMDummyScheduler", "MegatronLMOptimizerWrapper", "MegatronLMSchedulerWrapper", "T5TrainStep",
    "avg_losses_across_data_parallel_group", "gather_across_data_parallel_groups", "megatron_lm_initialize",
    "megatron_lm_prepare_data_loader", "megatron_lm_prepare_model_optimizer_scheduler",
    "megatron_lm_prepare_optimizer", "megatron_lm_prepare_scheduler",
)  # fmt: skip
_register("accelerate.utils.bnb", "has_4bit_bnb_layers", "load_and_quantize_model")
_register(
    "accelerate.utils.transformer_engine",
    "apply_fp8_autowrap", "contextual_fp8_autocast", "convert_model", "has_transformer_engine_layers",
)  # fmt: skip
_register(
    "accelerate.utils.ao", "convert_model_to_fp8_ao", "filter_first_and_last_linear_layers", "has_ao_layers"
)
_register("accelerate.utils.torch_xla", "install_xla")

# Transformers' Trainer path (issue 10): dataclasses, FSDP/DeepSpeed faces, launch helpers, modeling helpers.
_register(
    "accelerate.utils.dataclasses",
    "BaseEnum", "DeepSpeedSequenceParallelConfig", "DynamoBackend", "EnumWithContains", "LoggerType",
    "ProfileKwargs", "ProfilerActivity", "RNGType",
    "SageMakerDistributedType", "TorchContextParallelConfig", "TorchDynamoPlugin", "TorchTensorParallelConfig",
    "TorchTensorParallelPlugin", "get_module_class_from_name",
)  # fmt: skip
_register("accelerate.state.parallelism", "ParallelismConfig")
# Beyond upstream: the hook that runs an attention module of one's own under native sequence parallelism.
_register("accelerate.backends.parallel.ulysses", "ulysses_attention")
_register("accelerate.utils.modeling", "is_peft_model")
_register("accelerate.precision.helpers", "get_grad_scaler", "get_mixed_precision_context_manager")
_register(
    "accelerate.commands.launch_helpers",
    "PrepareForLaunch", "env_var_path_add", "prepare_deepspeed_cmd_env", "prepare_multi_gpu_env",
    "prepare_sagemager_args_inputs", "prepare_simple_launcher_cmd_env", "prepare_tpu",
)  # fmt: skip
_register(
    "accelerate.utils.fsdp_utils",
    "disable_fsdp_ram_efficient_loading", "enable_fsdp_ram_efficient_loading", "ensure_weights_retied",
    "fsdp2_apply_ac", "fsdp2_canonicalize_names", "fsdp2_load_full_state_dict", "fsdp2_prepare_auto_wrap_policy",
    "fsdp2_prepare_model", "fsdp2_switch_optimizer_parameters", "get_fsdp2_grad_scaler",
    "get_parameters_from_modules", "load_fsdp_model", "load_fsdp_optimizer", "merge_fsdp_weights",
    "save_fsdp_model", "save_fsdp_optimizer",
)  # fmt: skip
_register(
    "accelerate.utils.deepspeed",
    "DeepSpeedEngineWrapper", "DeepSpeedOptimizerWrapper", "DeepSpeedSchedulerWrapper", "DummyOptim",
    "DummyScheduler", "HfDeepSpeedConfig", "get_active_deepspeed_plugin", "map_pytorch_optim_to_deepspeed",
)  # fmt: skip

_register("accelerate.commands.config", "write_basic_config")

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
