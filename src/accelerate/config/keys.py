"""What every key of a launch config file does here: one table, so no key is silently ignored.

Each key upstream's ``accelerate config`` writes (top level and inside ``fsdp_config``,
``deepspeed_config``, ``dynamo_config``, ``mpirun_config``, ``fp8_config``, ``megatron_lm_config``,
``parallelism_config``, ``ipex_config``) has one :class:`KeyRule`: either the launch setting it feeds
(``acts``), or why it is refused (``refusal``). :func:`review_config` walks a loaded file with the
table and returns

* errors: a refused key set to a value that would change the run, in a section that is in use
  (``fsdp_config`` under ``distributed_type: FSDP``, ...), or an unknown key inside a section in use;
* warnings: a key set in a section that is not in use (``deepspeed_config`` under
  ``distributed_type: NO``). Upstream skips those; a user's file keeps working, and is told so.

A refused key at its "off" value (``false``, ``'no'``, empty, ``null``, or the value upstream always
writes) changes nothing and passes quietly. Pure: no torch, no ``os.environ``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelerate.config.config_file import LaunchConfig

DEEPSPEED_MULTINODE = (
    "DeepSpeed's own multi-machine launcher (pdsh hostfiles and filters) is not used here: run `accelerate launch` "
    "on each machine with --num_machines/--machine_rank (torch.distributed.run starts the DeepSpeed processes)"
)
XLA = "TPU/XLA runs through torch_xla"
MEGATRON = "Megatron-LM needs NVIDIA GPUs and the megatron-core package"
SAGEMAKER = "launching on Amazon SageMaker needs the SageMaker SDK and an AWS account"
TPU_POD = (
    "launching on every worker of a TPU pod from one machine is not available in this accelerate; start "
    '`accelerate launch --tpu` on each worker with `accelerate tpu-config --command "accelerate launch ..."`'
)
IPEX = "Intel Extension for PyTorch (ipex) is not supported (upstream dropped it too)"
AFFINITY = "CPU affinity (enable_cpu_affinity) pins GPU processes to NUMA nodes and is not available yet in this accelerate"


@dataclass(frozen=True)
class KeyRule:
    """One config key: the launch setting it feeds (``acts``), or why it is refused (``refusal``)."""

    key: str  # "num_processes" or "fsdp_config.fsdp_offload_params"
    acts: str | None = None  # what it does, e.g. "--num_processes"
    refusal: str | None = None
    off: tuple[Any, ...] = ()  # values that change nothing (besides null/false/'no'/empty)

    def __post_init__(self) -> None:
        if (self.acts is None) == (self.refusal is None):
            raise ValueError(f"KeyRule {self.key!r}: give exactly one of acts= and refusal=")


def _acts(what: str, *keys: str) -> list[KeyRule]:
    return [KeyRule(key, acts=what.format(key=key.rsplit(".", 1)[-1])) for key in keys]


def _refused(reason: str, *keys: str, off: tuple[Any, ...] = ()) -> list[KeyRule]:
    return [KeyRule(key, refusal=reason, off=off) for key in keys]


def _section(name: str, *keys: str) -> tuple[str, ...]:
    return tuple(f"{name}.{key}" for key in keys)


_FSDP_KEYS = _section(
    "fsdp_config", "fsdp_activation_checkpointing", "fsdp_activation_checkpointing_offload",
    "fsdp_auto_wrap_policy", "fsdp_backward_prefetch", "fsdp_backward_prefetch_policy",
    "fsdp_cpu_ram_efficient_loading", "fsdp_forward_prefetch", "fsdp_ignored_modules",
    "fsdp_min_num_params", "fsdp_offload_params", "fsdp_reshard_after_forward", "fsdp_sharding_strategy",
    "fsdp_state_dict_type", "fsdp_sync_module_states", "fsdp_transformer_layer_cls_to_wrap",
    "fsdp_use_orig_params", "fsdp_version",
)  # fmt: skip
_DEEPSPEED_KEYS = _section(
    "deepspeed_config", "deepspeed_config_file", "deepspeed_moe_layer_cls_names", "deepspeed_multinode_launcher",
    "gradient_accumulation_steps", "gradient_clipping", "offload_optimizer_device",
    "offload_optimizer_nvme_path", "offload_param_device", "offload_param_nvme_path", "zero3_init_flag",
    "zero3_save_16bit_model", "zero_stage",
)  # fmt: skip
_DEEPSPEED_MULTINODE_KEYS = _section(
    "deepspeed_config", "deepspeed_exclusion_filter", "deepspeed_hostfile", "deepspeed_inclusion_filter"
)
_MEGATRON_KEYS = _section(
    "megatron_lm_config", "megatron_lm_attention_backend", "megatron_lm_attention_dropout",
    "megatron_lm_attention_softmax_in_fp32", "megatron_lm_calculate_per_token_loss",
    "megatron_lm_context_parallel_size", "megatron_lm_decoder_last_pipeline_num_layers",
    "megatron_lm_eod_mask_loss", "megatron_lm_expert_model_parallel_size",
    "megatron_lm_expert_tensor_parallel_size", "megatron_lm_gradient_clipping", "megatron_lm_hidden_dropout",
    "megatron_lm_no_load_optim", "megatron_lm_no_save_optim", "megatron_lm_num_micro_batches",
    "megatron_lm_optimizer_cpu_offload", "megatron_lm_overlap_cpu_optimizer_d2h_h2d", "megatron_lm_pp_degree",
    "megatron_lm_recompute_activations", "megatron_lm_recompute_granularity", "megatron_lm_recompute_method",
    "megatron_lm_recompute_num_layers", "megatron_lm_sequence_parallelism", "megatron_lm_tp_degree",
    "megatron_lm_use_custom_fsdp", "megatron_lm_use_distributed_optimizer",
    "megatron_lm_use_precision_aware_optimizer", "megatron_lm_use_rotary_position_embeddings",
)  # fmt: skip
# Both spellings: upstream's questionnaire writes amax_compute_algo/amax_history_len (and older
# files optimization_level), its launcher reads the longer names.
_FP8_KEYS = _section(
    "fp8_config", "amax_compute_algo", "amax_compute_algorithm", "amax_history_len", "amax_history_length",
    "backend", "enable_fsdp_float8_all_gather", "fp8_format", "interval", "margin", "opt_level",
    "optimization_level", "override_linear_precision", "pad_inner_dim", "use_autocast_during_eval",
)  # fmt: skip
_PARALLELISM_KEYS = _section(
    "parallelism_config", "parallelism_config_cp_backend", "parallelism_config_cp_comm_strategy",
    "parallelism_config_cp_size", "parallelism_config_dp_replicate_size", "parallelism_config_dp_shard_size",
    "parallelism_config_sp_attn_implementation", "parallelism_config_sp_backend",
    "parallelism_config_sp_seq_length", "parallelism_config_sp_seq_length_is_variable",
    "parallelism_config_sp_size", "parallelism_config_tp_size",
    "parallelism_config_pp_size", "parallelism_config_pp_schedule", "parallelism_config_pp_microbatches",
    "parallelism_config_ep_size",
)  # fmt: skip
_SAGEMAKER_KEYS = (
    "additional_args", "base_job_name", "ec2_instance_type", "iam_role_name", "image_uri", "profile",
    "py_version", "pytorch_version", "region", "sagemaker_inputs_file", "sagemaker_metrics_file",
    "transformers_version",
)  # fmt: skip
_TPU_CONFIG_KEYS = ("tpu_name", "tpu_zone", "commands", "command_file")
_TPU_POD_KEYS = ("tpu_use_cluster", "tpu_use_sudo", "tpu_vm", "tpu_env")
_TPU_KEYS = (*_TPU_CONFIG_KEYS, *_TPU_POD_KEYS)

RULES: tuple[KeyRule, ...] = (
    *_acts(
        "--{key}",
        "num_processes",
        "num_machines",
        "machine_rank",
        "main_process_ip",
        "main_process_port",
        "rdzv_backend",
        "same_network",
        "gpu_ids",
        "mixed_precision",
        "debug",
    ),  # fmt: skip
    KeyRule("use_cpu", acts="--cpu"),
    KeyRule("compute_environment", acts="LOCAL_MACHINE runs here; AMAZON_SAGEMAKER is refused"),
    KeyRule(
        "distributed_type",
        acts="NO/MULTI_CPU/MULTI_GPU/MULTI_XPU/FSDP/DEEPSPEED/XLA run here; the others are refused",
    ),
    KeyRule("downcast_bf16", acts="XLA_DOWNCAST_BF16 instead of XLA_USE_BF16 under bf16 (TPU launches)"),
    KeyRule("enable_cpu_affinity", refusal=AFFINITY),
    # Every upstream file carries main_training_function: main; only TPU launches call a function.
    KeyRule("main_training_function", acts="the function a TPU launch calls in each process"),
    *_acts("read by `accelerate tpu-config`", *_TPU_CONFIG_KEYS),
    *_refused(TPU_POD, *_TPU_POD_KEYS),
    *_refused(SAGEMAKER, *_SAGEMAKER_KEYS),
    # Sections: the key itself is a container; its sub-keys have their own rows.
    *_acts(
        "the [{key}] sub-keys below",
        "dynamo_config",
        "mpirun_config",
        "fsdp_config",
        "deepspeed_config",
        "megatron_lm_config",
        "fp8_config",
        "parallelism_config",
        "ipex_config",
    ),  # fmt: skip
    *_acts(
        "--{key}",
        *_section(
            "dynamo_config",
            "dynamo_backend",
            "dynamo_mode",
            "dynamo_use_fullgraph",
            "dynamo_use_dynamic",
            "dynamo_use_regional_compilation",
        ),
    ),  # fmt: skip
    KeyRule("mpirun_config.mpirun_hostfile", acts="--mpirun_hostfile (CPU processes started by mpirun)"),
    KeyRule("mpirun_config.mpirun_ccl", acts="CCL_WORKER_COUNT of every process (Intel oneCCL workers)"),
    *_acts("the FSDP plugin's setting (the FSDP_* variable of --{key})", *_FSDP_KEYS),
    *_acts("--{key} (with distributed_type: DEEPSPEED)", *_DEEPSPEED_KEYS),
    *_refused(DEEPSPEED_MULTINODE, *_DEEPSPEED_MULTINODE_KEYS),
    *_refused(MEGATRON, *_MEGATRON_KEYS),
    *_acts("the fp8 recipe's setting (ACCELERATE_FP8_*, with mixed_precision: fp8)", *_FP8_KEYS),
    # The launcher checks the sizes together (their product, CPU limits) in launch/parallelism.py.
    *_acts("--{key} (the section itself is --use_parallelism_config)", *_PARALLELISM_KEYS),
    KeyRule("ipex_config.ipex", refusal=IPEX),
    KeyRule("ipex_config.use_xpu", refusal=IPEX),
)
RULE_OF: dict[str, KeyRule] = {rule.key: rule for rule in RULES}
SECTIONS = ("dynamo_config", "mpirun_config", "fsdp_config", "deepspeed_config", "megatron_lm_config",
            "fp8_config", "parallelism_config", "ipex_config")  # fmt: skip


def _active(section: str, config: LaunchConfig) -> tuple[bool, str]:
    """Whether a section is in use, and if not, why (for the warning)."""
    kind = config.distributed_type or "NO"
    by_type = {"fsdp_config": "FSDP", "deepspeed_config": "DEEPSPEED", "megatron_lm_config": "MEGATRON_LM"}
    if section in by_type:
        return kind == by_type[section], f"distributed_type is {kind}, not {by_type[section]}"
    if section == "fp8_config":
        return (
            config.mixed_precision == "fp8",
            f"mixed_precision is {config.mixed_precision or 'no'}, not fp8",
        )
    return True, ""


_TPU_SCOPE = frozenset(_TPU_KEYS) | {"downcast_bf16", "main_training_function"}


def _top_level_active(key: str, config: LaunchConfig) -> tuple[bool, str]:
    if key in _TPU_SCOPE:
        kind = config.distributed_type or "NO"
        return kind == "XLA", f"distributed_type is {kind}, not XLA (TPU)"
    if key in _SAGEMAKER_KEYS:
        env = config.compute_environment or "LOCAL_MACHINE"
        return env == "AMAZON_SAGEMAKER", f"compute_environment is {env}, not AMAZON_SAGEMAKER"
    return True, ""


def is_off(value: Any, rule: KeyRule) -> bool:
    """Values that change nothing: null, false, 'no'/'false', empty containers, and the rule's own."""
    if value is None or value is False or value in rule.off:
        return True
    if isinstance(value, str) and value.strip().lower() in ("", "no", "false", "none", "null"):
        return True
    return isinstance(value, list | tuple | dict) and not value


@dataclass
class ConfigReview:
    """What :func:`review_config` found; ``errors`` refuse the launch, ``warnings`` are said."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def iter_keys(config: LaunchConfig) -> list[tuple[str, Any]]:
    """Every key the file sets, sections expanded into ``section.sub_key`` entries."""
    out: list[tuple[str, Any]] = []
    for key, value in config.to_dict().items():
        out.append((key, value))
        if key in SECTIONS and isinstance(value, Mapping):
            out += [(f"{key}.{sub}", sub_value) for sub, sub_value in value.items()]
    return out


def review_config(config: LaunchConfig, path: str) -> ConfigReview:
    """Checks every key ``config`` sets against :data:`RULES` (see the module docstring)."""
    review = ConfigReview()
    for key, value in iter_keys(config):
        section = key.split(".", 1)[0] if "." in key else None
        active, why_not = _active(section, config) if section else _top_level_active(key, config)
        rule = RULE_OF.get(key)
        if rule is None:
            message = (
                f"The config file {path} sets {key}: {value!r}, which is not a key of {section} that upstream's "
                "`accelerate config` writes"
            )
            if active:
                review.errors.append(f"{message}. Remove it or check its spelling.")
            else:
                review.warnings.append(f"{message}; it is not used ({why_not}).")
            continue
        if rule.refusal is None and section is not None and not active and not is_off(value, rule):
            # A setting of a backend the file does not use (deepspeed_config under distributed_type: NO).
            review.warnings.append(
                f"The config file {path} sets {key}: {value!r}, which is not used: {why_not}."
            )
            continue
        if rule.refusal is None or is_off(value, rule):
            continue
        if active:
            review.errors.append(f"The config file {path} sets {key}: {value!r}, but {rule.refusal}.")
        else:
            review.warnings.append(
                f"The config file {path} sets {key}: {value!r}, which is not used: {why_not} "
                f"(and {rule.refusal})."
            )
    return review
