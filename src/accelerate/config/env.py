"""The one table of environment variables shared by the launcher and the runtime.

`accelerate launch` is the only writer of these variables (it sets them in the children's
environment); the runtime reads them only through :func:`read_launch_env`. Keeping the contract in
one table (its rows: :mod:`accelerate.config.env_contract`) means a new setting is one new row, and `--dry_run` can print exactly what a child gets.

Variables that belong to torch.distributed.run (RANK, WORLD_SIZE, LOCAL_RANK, ...) are read by
``accelerate.state.environment``; they are not part of this table because torchrun owns them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

# The rows live in their own module (the table is long); ENV_CONTRACT and EnvVar stay importable here.
from accelerate.config.env_contract import ENV_CONTRACT, EnvVar
from accelerate.utils.records import frozen_record

if TYPE_CHECKING:
    from accelerate.utils.fault_tolerance import FaultToleranceKwargs

__all__ = [
    "ENV_CONTRACT", "EnvVar", "LaunchEnv", "dynamo_defaults", "parallelism_defaults", "parse_bool",
    "read_launch_env", "write_launch_env",
]  # fmt: skip

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
    fault_tolerance: bool | None = None
    ft_replica_group_id: int | None = None
    ft_num_replica_groups: int | None = None
    ft_lighthouse: str | None = None
    ft_bind_address: str | None = None
    ft_min_replicas: int | None = None
    ft_heartbeat_ms: int | None = None
    ft_timeout_s: int | None = None
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
    use_fsdp: bool | None = None
    fsdp_version: str | None = None
    fsdp_sharding_strategy: str | None = None
    fsdp_reshard_after_forward: str | None = None
    fsdp_backward_prefetch: str | None = None
    fsdp_forward_prefetch: str | None = None
    fsdp_auto_wrap_policy: str | None = None
    fsdp_transformer_layer_cls_to_wrap: str | None = None
    fsdp_min_num_params: str | None = None
    fsdp_offload_params: str | None = None
    fsdp_state_dict_type: str | None = None
    fsdp_use_orig_params: str | None = None
    fsdp_sync_module_states: str | None = None
    fsdp_cpu_ram_efficient_loading: str | None = None
    fsdp_activation_checkpointing: str | None = None
    fsdp_activation_checkpointing_offload: str | None = None
    fsdp_ignored_modules: str | None = None
    use_parallelism_config: bool | None = None
    parallelism_config_dp_replicate_size: int | None = None
    parallelism_config_dp_shard_size: int | None = None
    parallelism_config_tp_size: int | None = None
    parallelism_config_cp_size: int | None = None
    parallelism_config_cp_backend: str | None = None
    parallelism_config_cp_comm_strategy: str | None = None
    parallelism_config_sp_size: int | None = None
    parallelism_config_pp_size: int | None = None
    parallelism_config_pp_schedule: str | None = None
    parallelism_config_ep_size: int | None = None
    parallelism_config_pp_microbatches: int | None = None
    parallelism_config_sp_backend: str | None = None
    parallelism_config_sp_seq_length: str | None = None
    parallelism_config_sp_seq_length_is_variable: bool | None = None
    parallelism_config_sp_attn_implementation: str | None = None

    def fault_tolerance_settings(self) -> FaultToleranceKwargs | None:
        """The launcher's ``--fault_tolerance`` settings as a handler (None when not asked)."""
        if not self.fault_tolerance:
            return None
        from accelerate.utils.fault_tolerance import FaultToleranceKwargs

        given: dict[str, Any] = {
            "replica_group_id": self.ft_replica_group_id, "num_replica_groups": self.ft_num_replica_groups,
            "lighthouse_address": self.ft_lighthouse, "bind_address": self.ft_bind_address,
            "min_replicas": self.ft_min_replicas, "heartbeat_ms": self.ft_heartbeat_ms, "timeout_s": self.ft_timeout_s,
        }  # fmt: skip
        return FaultToleranceKwargs(**{name: value for name, value in given.items() if value is not None})


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
    "PARALLELISM_CONFIG_PP_SIZE": "pp_size",
    "PARALLELISM_CONFIG_PP_SCHEDULE": "pp_schedule",
    "PARALLELISM_CONFIG_EP_SIZE": "ep_size",
    "PARALLELISM_CONFIG_PP_MICROBATCHES": "pp_microbatches",
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
