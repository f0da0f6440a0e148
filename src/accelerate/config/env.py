"""The one table of environment variables shared by the launcher and the runtime.

`accelerate launch` is the only writer of these variables (it sets them in the children's
environment); the runtime reads them only through :func:`read_launch_env`. Keeping the contract in
one table means a new setting is one new row, and `--dry_run` can print exactly what a child gets.

Variables that belong to torch.distributed.run (RANK, WORLD_SIZE, LOCAL_RANK, ...) are read by
``accelerate.state.environment``; they are not part of this table because torchrun owns them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from accelerate.utils.dataclasses import AVAILABLE_MIXED_PRECISION_MODES
from accelerate.utils.records import frozen_record


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
        "PARALLELISM_CONFIG_SP_SIZE",
        "parallelism_config_sp_size",
        "int",
        "sequence-parallel degree (DeepSpeed Ulysses)",
    ),
    EnvVar(
        "PARALLELISM_CONFIG_SP_BACKEND",
        "parallelism_config_sp_backend",
        "str",
        "sequence-parallel backend: deepspeed",
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

_TRUE = {"1", "true", "yes", "on", "y"}
_FALSE = {"0", "false", "no", "off", "n", ""}


def parse_bool(name: str, value: str) -> bool:
    """Parses a boolean environment value, raising with the variable's name on anything else."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(
        f"Environment variable {name}={value!r} is not a boolean; use 1/0, true/false or yes/no."
    )


@frozen_record
class LaunchEnv:
    """What the launcher told this process, as typed values (``None`` means "not set").

    A ``frozen_record``, not a dataclass: every ``Accelerator()`` reads it, and a dataclass of this
    many fields cost ~4 ms to create at import (see ``accelerate.utils.records``).
    """

    mixed_precision: str | None = None
    cpu: bool | None = None
    torch_device: str | None = None
    debug: bool | None = None
    debug_timeout: int | None = None
    gradient_accumulation_steps: int | None = None
    dynamo_backend: str | None = None
    dynamo_mode: str | None = None
    dynamo_use_fullgraph: bool | None = None
    dynamo_use_dynamic: bool | None = None
    dynamo_use_regional_compilation: bool | None = None
    downcast_bf16: bool | None = None
    hang_report_dir: str | None = None
    use_deepspeed: bool | None = None
    deepspeed_config_file: str | None = None
    zero_stage: int | None = None
    gradient_clipping: str | None = None
    offload_optimizer_device: str | None = None
    offload_param_device: str | None = None
    offload_optimizer_nvme_path: str | None = None
    offload_param_nvme_path: str | None = None
    zero3_init_flag: bool | None = None
    zero3_save_16bit_model: bool | None = None
    deepspeed_moe_layer_cls_names: str | None = None
    fp8_backend: str | None = None
    fp8_pad_inner_dim: bool | None = None
    fp8_enable_fsdp_float8_all_gather: bool | None = None
    fp8_format: str | None = None
    fp8_margin: int | None = None
    fp8_interval: int | None = None
    fp8_amax_history_len: int | None = None
    fp8_amax_compute_algo: str | None = None
    fp8_override_linear_precision: str | None = None
    fp8_use_autocast_during_eval: bool | None = None
    fp8_opt_level: str | None = None
    use_parallelism_config: bool | None = None
    parallelism_config_dp_replicate_size: int | None = None
    parallelism_config_dp_shard_size: int | None = None
    parallelism_config_tp_size: int | None = None
    parallelism_config_cp_size: int | None = None
    parallelism_config_cp_backend: str | None = None
    parallelism_config_cp_comm_strategy: str | None = None
    parallelism_config_sp_size: int | None = None
    parallelism_config_sp_backend: str | None = None
    parallelism_config_sp_seq_length: str | None = None
    parallelism_config_sp_seq_length_is_variable: bool | None = None
    parallelism_config_sp_attn_implementation: str | None = None


def read_launch_env(environ: Mapping[str, str] | None = None) -> LaunchEnv:
    """Reads the contract variables from ``environ`` (default: ``os.environ``)."""
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for var in ENV_CONTRACT:
        raw = env.get(var.name)
        if raw is None or raw == "":
            continue
        if var.kind == "bool":
            values[var.field] = parse_bool(var.name, raw)
        elif var.kind == "int":
            try:
                values[var.field] = int(raw)
            except ValueError:
                raise ValueError(f"Environment variable {var.name}={raw!r} must be an integer.") from None
        else:
            values[var.field] = raw.strip().lower() if var.field == "mixed_precision" else raw
    return LaunchEnv(**values)  # type: ignore[arg-type]


# What upstream's ``ParallelismConfig()`` takes from the launcher for the fields it is not given.
_PARALLELISM_DEFAULTS = {
    "PARALLELISM_CONFIG_DP_REPLICATE_SIZE": "dp_replicate_size",
    "PARALLELISM_CONFIG_DP_SHARD_SIZE": "dp_shard_size",
    "PARALLELISM_CONFIG_TP_SIZE": "tp_size",
    "PARALLELISM_CONFIG_CP_SIZE": "cp_size",
    "PARALLELISM_CONFIG_SP_SIZE": "sp_size",
    "PARALLELISM_CONFIG_CP_BACKEND": "cp_backend",
    "PARALLELISM_CONFIG_SP_BACKEND": "sp_backend",
}


def parallelism_defaults(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """The ``ParallelismConfig`` fields the launcher wrote (``--parallelism_config_*``), by field name.

    Upstream's ``ParallelismConfig()`` fills the sizes and backends it was not given from these
    variables (whether or not ``ACCELERATE_USE_PARALLELISM_CONFIG`` is set), so a config a script
    builds inside a launched run has the launcher's sizes. This is the one place it reads them.

    Example:
        >>> parallelism_defaults({"PARALLELISM_CONFIG_TP_SIZE": "2"})
        {'tp_size': 2}
    """
    env = os.environ if environ is None else environ
    by_name = {var.name: var for var in ENV_CONTRACT}
    out: dict[str, object] = {}
    for name, field in _PARALLELISM_DEFAULTS.items():
        raw = env.get(name)
        if raw is None or raw == "":
            continue
        if by_name[name].kind == "int":
            try:
                out[field] = int(raw)
            except ValueError:
                raise ValueError(f"Environment variable {name}={raw!r} must be an integer.") from None
        else:
            out[field] = raw
    return out


_DYNAMO_DEFAULTS = {
    "ACCELERATE_DYNAMO_BACKEND": "backend",
    "ACCELERATE_DYNAMO_MODE": "mode",
    "ACCELERATE_DYNAMO_USE_FULLGRAPH": "fullgraph",
    "ACCELERATE_DYNAMO_USE_DYNAMIC": "dynamic",
    "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "use_regional_compilation",
}


def dynamo_defaults(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """The ``TorchDynamoPlugin`` fields the launcher wrote (``--dynamo_*``), by field name.

    Upstream's ``TorchDynamoPlugin()`` fills the fields it was not given from these variables.

    Example:
        >>> dynamo_defaults({"ACCELERATE_DYNAMO_BACKEND": "inductor", "ACCELERATE_DYNAMO_USE_FULLGRAPH": "1"})
        {'backend': 'inductor', 'fullgraph': True}
    """
    env = os.environ if environ is None else environ
    by_name = {var.name: var for var in ENV_CONTRACT}
    out: dict[str, object] = {}
    for name, field in _DYNAMO_DEFAULTS.items():
        raw = env.get(name)
        if raw is None or raw == "":
            continue
        out[field] = parse_bool(name, raw) if by_name[name].kind == "bool" else raw
    return out


def write_launch_env(settings: Mapping[str, object]) -> dict[str, str]:
    """Turns launcher settings (keyed by contract field) into the variables a child gets.

    Unknown fields raise, so the launcher cannot pass a setting the runtime would never read.
    """
    by_field = {var.field: var for var in ENV_CONTRACT}
    out: dict[str, str] = {}
    for field, value in settings.items():
        if value is None:
            continue
        var = by_field.get(field)
        if var is None:
            raise KeyError(f"{field!r} is not part of the launcher/runtime environment contract")
        if var.kind == "bool":
            out[var.name] = "true" if value else "false"
        else:
            out[var.name] = str(value)
    return out
