"""The rows of the launcher/runtime environment contract: each variable, its field and its kind.

:mod:`accelerate.config.env` reads and writes them (``LaunchEnv`` has one field per row); the
docs' environment page is generated from this table. A new launch setting is one row here and one
``LaunchEnv`` field.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelerate.utils.enums import AVAILABLE_MIXED_PRECISION_MODES

# Written by `accelerate launch` for an elastic range, read by GradientState's accumulation plugin:
# processes of the largest group the range allows. Here (pure data) rather than in accelerate.state,
# so that the launcher names it without importing the runtime state and what that loads.
ELASTIC_MAX_PROCESSES_ENV = "ACCELERATE_ELASTIC_MAX_PROCESSES"


@dataclass(frozen=True)
class EnvVar:
    """One row of the contract: the variable, what it carries and how to parse it."""

    name: str
    field: str
    kind: str  # "str" | "int" | "bool"
    help: str


ENV_CONTRACT: tuple[EnvVar, ...] = (
    EnvVar(
        "ACCELERATE_MIXED_PRECISION", "mixed_precision", "str", " | ".join(AVAILABLE_MIXED_PRECISION_MODES)
    ),
    EnvVar("ACCELERATE_USE_CPU", "cpu", "bool", "force CPU even when an accelerator is visible"),
    EnvVar(
        "ACCELERATE_TORCH_DEVICE",
        "torch_device",
        "str",
        "the torch device this process uses as given (e.g. cuda:1, cpu), instead of the one picked by rank",
    ),
    EnvVar(
        "ACCELERATE_DEBUG_MODE", "debug", "bool", "check tensor shapes across ranks before each collective"
    ),
    EnvVar(
        "ACCELERATE_DEBUG_TIMEOUT",
        "debug_timeout",
        "int",
        "debug mode: seconds to wait for every process to reach a collective before naming the missing ones",
    ),
    EnvVar(
        "ACCELERATE_GRADIENT_ACCUMULATION_STEPS",
        "gradient_accumulation_steps",
        "int",
        "default number of micro-steps per optimizer step",
    ),
    EnvVar("ACCELERATE_DYNAMO_BACKEND", "dynamo_backend", "str", "torch.compile backend, 'no' to disable"),
    EnvVar(
        "ACCELERATE_DYNAMO_MODE", "dynamo_mode", "str", "torch.compile mode (default, reduce-overhead, ...)"
    ),
    EnvVar("ACCELERATE_DYNAMO_USE_FULLGRAPH", "dynamo_use_fullgraph", "bool", "torch.compile(fullgraph=...)"),
    EnvVar("ACCELERATE_DYNAMO_USE_DYNAMIC", "dynamo_use_dynamic", "bool", "torch.compile(dynamic=...)"),
    EnvVar(
        "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION",
        "dynamo_use_regional_compilation",
        "bool",
        "compile each repeated block once (compile_regions) instead of the whole model",
    ),
    EnvVar("ACCELERATE_DOWNCAST_BF16", "downcast_bf16", "bool", "TPU only: store fp32 as bf16"),
    EnvVar(
        "ACCELERATE_HANG_REPORT_DIR",
        "hang_report_dir",
        "str",
        "folder where each rank's hang watchdog writes its report for the launcher's summary",
    ),
    # Fault-tolerant replica groups (--fault_tolerance and its --ft_* flags; our addition, torchft).
    EnvVar(
        "ACCELERATE_FAULT_TOLERANCE",
        "fault_tolerance",
        "bool",
        "run as one replica group of a fault-tolerant run",
    ),
    EnvVar(
        "ACCELERATE_FT_REPLICA_GROUP_ID", "ft_replica_group_id", "int", "this replica group's number, from 0"
    ),
    EnvVar(
        "ACCELERATE_FT_NUM_REPLICA_GROUPS",
        "ft_num_replica_groups",
        "int",
        "how many replica groups the run has",
    ),
    EnvVar("ACCELERATE_FT_LIGHTHOUSE", "ft_lighthouse", "str", "host:port of torchft's lighthouse"),
    EnvVar(
        "ACCELERATE_FT_BIND_ADDRESS", "ft_bind_address", "str", "the address this group's servers listen on"
    ),
    EnvVar(
        "ACCELERATE_FT_MIN_REPLICAS",
        "ft_min_replicas",
        "int",
        "the fewest healthy groups a step commits with",
    ),
    EnvVar(
        "ACCELERATE_FT_HEARTBEAT_MS", "ft_heartbeat_ms", "int", "heartbeat interval to the lighthouse (ms)"
    ),
    EnvVar(
        "ACCELERATE_FT_TIMEOUT_S", "ft_timeout_s", "int", "timeout of a gradient exchange or a healing (s)"
    ),
    # DeepSpeed (--use_deepspeed and its flags): the defaults of DeepSpeedPlugin() in the children.
    EnvVar(
        "ACCELERATE_USE_DEEPSPEED",
        "use_deepspeed",
        "bool",
        "train with DeepSpeed (a default DeepSpeedPlugin)",
    ),
    EnvVar("ACCELERATE_DEEPSPEED_CONFIG_FILE", "deepspeed_config_file", "str", "DeepSpeed JSON config file"),
    EnvVar("ACCELERATE_DEEPSPEED_ZERO_STAGE", "zero_stage", "int", "ZeRO stage 0-3"),
    EnvVar(
        "ACCELERATE_GRADIENT_CLIPPING", "gradient_clipping", "str", "DeepSpeed gradient clipping (max norm)"
    ),
    EnvVar(
        "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE",
        "offload_optimizer_device",
        "str",
        "none | cpu | nvme",
    ),
    EnvVar("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "offload_param_device", "str", "none | cpu | nvme"),
    EnvVar(
        "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH", "offload_optimizer_nvme_path", "str", "NVMe path"
    ),
    EnvVar("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH", "offload_param_nvme_path", "str", "NVMe path"),
    EnvVar("ACCELERATE_DEEPSPEED_ZERO3_INIT", "zero3_init_flag", "bool", "build models partitioned (ZeRO-3)"),
    EnvVar(
        "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL",
        "zero3_save_16bit_model",
        "bool",
        "gather weights on save",
    ),
    EnvVar(
        "ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES",
        "deepspeed_moe_layer_cls_names",
        "str",
        "MoE layer classes",
    ),
    # fp8 (--fp8_backend and the other --fp8_* flags, a config file's fp8_config section): upstream's
    # names. The children build their fp8 recipe from these when the script passes none.
    EnvVar("ACCELERATE_FP8_BACKEND", "fp8_backend", "str", "fp8 library: AO (torchao) | TE | MSAMP"),
    EnvVar(
        "ACCELERATE_FP8_PAD_INNER_DIM",
        "fp8_pad_inner_dim",
        "bool",
        "torchao: pad matmul sizes to multiples of 16",
    ),
    EnvVar(
        "ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER",
        "fp8_enable_fsdp_float8_all_gather",
        "bool",
        "torchao: all-gather FSDP2 weights in float8",
    ),
    EnvVar("ACCELERATE_FP8_FORMAT", "fp8_format", "str", "Transformer Engine: HYBRID | E4M3 | E5M2"),
    EnvVar("ACCELERATE_FP8_MARGIN", "fp8_margin", "int", "Transformer Engine: scaling-factor margin"),
    EnvVar(
        "ACCELERATE_FP8_INTERVAL",
        "fp8_interval",
        "int",
        "Transformer Engine: steps between scaling-factor updates",
    ),
    EnvVar(
        "ACCELERATE_FP8_AMAX_HISTORY_LEN",
        "fp8_amax_history_len",
        "int",
        "Transformer Engine: amax history length",
    ),
    EnvVar(
        "ACCELERATE_FP8_AMAX_COMPUTE_ALGO",
        "fp8_amax_compute_algo",
        "str",
        "Transformer Engine: max | most_recent",
    ),
    EnvVar(
        "ACCELERATE_FP8_OVERRIDE_LINEAR_PRECISION",
        "fp8_override_linear_precision",
        "str",
        "Transformer Engine: (fprop, dgrad, wgrad) in high precision",
    ),
    EnvVar(
        "ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL",
        "fp8_use_autocast_during_eval",
        "bool",
        "Transformer Engine: fp8 in eval mode too",
    ),
    EnvVar("ACCELERATE_FP8_OPT_LEVEL", "fp8_opt_level", "str", "MS-AMP: O1 | O2"),
    # FSDP (--use_fsdp and the --fsdp_* flags, a config file's fsdp_config section): upstream's names
    # (no ACCELERATE_ prefix). Carried as text: the FSDP plugin checks each value with its own message.
    EnvVar(
        "ACCELERATE_USE_FSDP",
        "use_fsdp",
        "bool",
        "train with FSDP2 (a default FullyShardedDataParallelPlugin)",
    ),
    EnvVar(
        "FSDP_VERSION",
        "fsdp_version",
        "str",
        "1 | 2 (both run on FSDP2; 1's sharding strategy is translated)",
    ),
    EnvVar(
        "FSDP_SHARDING_STRATEGY", "fsdp_sharding_strategy", "str", "FSDP1: FULL_SHARD | SHARD_GRAD_OP | ..."
    ),
    EnvVar(
        "FSDP_RESHARD_AFTER_FORWARD",
        "fsdp_reshard_after_forward",
        "str",
        "FSDP2: free gathered parameters after forward (true | false | a group size)",
    ),
    EnvVar("FSDP_BACKWARD_PREFETCH", "fsdp_backward_prefetch", "str", "FSDP1: BACKWARD_PRE | BACKWARD_POST"),
    EnvVar("FSDP_FORWARD_PREFETCH", "fsdp_forward_prefetch", "str", "FSDP1 only: accepted"),
    EnvVar(
        "FSDP_AUTO_WRAP_POLICY",
        "fsdp_auto_wrap_policy",
        "str",
        "TRANSFORMER_BASED_WRAP | SIZE_BASED_WRAP | NO_WRAP",
    ),
    EnvVar(
        "FSDP_TRANSFORMER_CLS_TO_WRAP",
        "fsdp_transformer_layer_cls_to_wrap",
        "str",
        "comma-separated block class names to shard alone",
    ),
    EnvVar(
        "FSDP_MIN_NUM_PARAMS", "fsdp_min_num_params", "str", "parameters per sharded block (SIZE_BASED_WRAP)"
    ),
    EnvVar("FSDP_OFFLOAD_PARAMS", "fsdp_offload_params", "str", "keep sharded parameters in host memory"),
    EnvVar(
        "FSDP_STATE_DICT_TYPE",
        "fsdp_state_dict_type",
        "str",
        "SHARDED_STATE_DICT | FULL_STATE_DICT (how save_state writes the model)",
    ),
    EnvVar("FSDP_USE_ORIG_PARAMS", "fsdp_use_orig_params", "str", "FSDP1 only: accepted"),
    EnvVar(
        "FSDP_SYNC_MODULE_STATES", "fsdp_sync_module_states", "str", "broadcast rank 0's weights at prepare"
    ),
    EnvVar(
        "FSDP_CPU_RAM_EFFICIENT_LOADING",
        "fsdp_cpu_ram_efficient_loading",
        "str",
        "only rank 0 loads real weights; prepare broadcasts them",
    ),
    EnvVar(
        "FSDP_ACTIVATION_CHECKPOINTING",
        "fsdp_activation_checkpointing",
        "str",
        "recompute each sharded block's activations in backward",
    ),
    EnvVar(
        "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD",
        "fsdp_activation_checkpointing_offload",
        "str",
        "accepted for upstream compatibility",
    ),
    EnvVar("FSDP_IGNORED_MODULES", "fsdp_ignored_modules", "str", "modules FSDP leaves unsharded"),
    # N-D parallelism (--use_parallelism_config, a config file's parallelism_config section): the
    # children build their ParallelismConfig from these when the script passes none. Upstream's
    # names (no ACCELERATE_ prefix), so scripts and tools that set them by hand keep working.
    EnvVar(
        "ACCELERATE_USE_PARALLELISM_CONFIG",
        "use_parallelism_config",
        "bool",
        "build a ParallelismConfig from the PARALLELISM_CONFIG_* sizes",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_DP_REPLICATE_SIZE",
        "parallelism_config_dp_replicate_size",
        "int",
        "data-parallel replicas (DDP / HSDP's outer dimension)",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_DP_SHARD_SIZE",
        "parallelism_config_dp_shard_size",
        "int",
        "data-parallel shards (FSDP)",
    ),
    EnvVar("PARALLELISM_CONFIG_TP_SIZE", "parallelism_config_tp_size", "int", "tensor-parallel degree"),
    EnvVar(
        "PARALLELISM_CONFIG_CP_SIZE",
        "parallelism_config_cp_size",
        "int",
        "context-parallel degree (GPUs only)",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_CP_BACKEND",
        "parallelism_config_cp_backend",
        "str",
        "context-parallel backend: torch",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_CP_COMM_STRATEGY",
        "parallelism_config_cp_comm_strategy",
        "str",
        "ring attention's exchange: allgather | alltoall",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_PP_SIZE",
        "parallelism_config_pp_size",
        "int",
        "pipeline-parallel stages (ParallelismConfig.pp_size; beyond upstream)",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_PP_SCHEDULE",
        "parallelism_config_pp_schedule",
        "str",
        "pipeline schedule: GPipe | 1F1B | Interleaved1F1B",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_EP_SIZE",
        "parallelism_config_ep_size",
        "int",
        "expert-parallel degree, carved from dp_shard (ParallelismConfig.ep_size; beyond upstream)",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_PP_MICROBATCHES",
        "parallelism_config_pp_microbatches",
        "int",
        "micro-batches per batch under pipeline parallelism (default: pp_size)",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_SP_SIZE",
        "parallelism_config_sp_size",
        "int",
        "sequence-parallel (Ulysses) degree: each process holds 1/N of every sequence",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_SP_BACKEND",
        "parallelism_config_sp_backend",
        "str",
        "sequence-parallel backend: torch (native Ulysses) | deepspeed (with DeepSpeed)",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_SP_SEQ_LENGTH",
        "parallelism_config_sp_seq_length",
        "str",
        "sequence length for sequence parallelism",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE",
        "parallelism_config_sp_seq_length_is_variable",
        "bool",
        "sequence lengths vary between batches",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION",
        "parallelism_config_sp_attn_implementation",
        "str",
        "attention kernel under sequence parallelism",
    ),
)
