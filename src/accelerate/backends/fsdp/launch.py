"""``--use_fsdp --fsdp_*`` and a config file's ``fsdp_config``: checked, turned into the ``FSDP_*`` variables,
and read back into the run's plugin (:func:`plugin_with_launch_env`, from the ``fsdp_*`` fields of ``LaunchEnv``).

Flags win over the file. Every value is checked here, before anything starts, and the plan notes what
the settings become on FSDP2 (``--dry_run`` prints it). No torch import: the launcher stays light.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelerate.backends.fsdp.plugin import (
    BACKWARD_PREFETCH,
    FIELD_ENV,
    FSDP_ENV,
    SHARDING_STRATEGIES,
    USE_FSDP_ENV,
    WRAP_POLICIES,
    as_bool,
    fsdp2_layout,
)

if TYPE_CHECKING:
    from accelerate.backends.fsdp.plugin import FullyShardedDataParallelPlugin
    from accelerate.config.config_file import LaunchConfig
    from accelerate.config.env import LaunchEnv

# Launch flags (besides --use_fsdp), each the config key of the same name.
FLAG_HELP: dict[str, str] = {
    "fsdp_version": "1 or 2 (default 1). Both run on FSDP2 here; 1's sharding strategy is translated.",
    "fsdp_sharding_strategy": "FSDP1: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or HYBRID_SHARD_ZERO2.",
    "fsdp_reshard_after_forward": "FSDP2: free gathered parameters after forward (true) or keep them (false).",
    "fsdp_offload_params": "Keep sharded parameters in host memory (GPU runs only).",
    "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP: which blocks are sharded alone.",
    "fsdp_transformer_layer_cls_to_wrap": "Comma-separated block class names (TRANSFORMER_BASED_WRAP).",
    "fsdp_min_num_params": "Parameters per sharded block (SIZE_BASED_WRAP).",
    "fsdp_backward_prefetch": "FSDP1 only (FSDP2 prefetches by itself): BACKWARD_PRE, BACKWARD_POST, NO_PREFETCH.",
    "fsdp_forward_prefetch": "FSDP1 only: accepted, FSDP2 prefetches by itself.",
    "fsdp_state_dict_type": "SHARDED_STATE_DICT or FULL_STATE_DICT: how save_state writes the model.",
    "fsdp_use_orig_params": "FSDP1 only: accepted (FSDP2 always keeps the original parameters).",
    "fsdp_sync_module_states": "Broadcast rank 0's weights at prepare.",
    "fsdp_cpu_ram_efficient_loading": "Only rank 0 loads real weights (the others on meta); prepare broadcasts them.",
    "fsdp_activation_checkpointing": "Recompute each sharded block's activations in backward.",
    "fsdp_activation_checkpointing_offload": "Accepted for upstream compatibility (not used by FSDP2 here).",
}
_CHOICES: dict[str, tuple[str, ...]] = {
    "sharding_strategy": SHARDING_STRATEGIES,
    "auto_wrap_policy": WRAP_POLICIES,
    "state_dict_type": ("FULL_STATE_DICT", "SHARDED_STATE_DICT"),
    "backward_prefetch": BACKWARD_PREFETCH,
}
_BOOLS = (
    "reshard_after_forward", "offload_params", "forward_prefetch", "use_orig_params", "sync_module_states",
    "cpu_ram_efficient_loading", "activation_checkpointing", "activation_checkpointing_offload",
)  # fmt: skip


class FSDPLaunchError(ValueError):
    """An FSDP setting that cannot run; the message names the flag or key and the fix."""


@dataclass
class FSDPLaunch:
    """What the launcher sets for FSDP: the child variables and one note per translation."""

    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _given(
    flags: Mapping[str, Any], config: LaunchConfig | None, config_path: str
) -> dict[str, tuple[Any, str]]:
    """Each setting (key without ``fsdp_``) with its value and source; flags win over the file."""
    out: dict[str, tuple[Any, str]] = {}
    section = (config.fsdp_config or {}) if config is not None and config.distributed_type == "FSDP" else {}
    for key, value in section.items():
        name = key.removeprefix("fsdp_")
        name = "backward_prefetch" if name == "backward_prefetch_policy" else name  # older files' spelling
        if value is not None:
            out[name] = (value, f"fsdp_config.{key} in {config_path}")
    for flag, value in flags.items():
        if flag.startswith("fsdp_") and value is not None:
            out[flag.removeprefix("fsdp_")] = (value, f"--{flag}")
    return out


def _check(name: str, value: Any, source: str) -> str:
    """The value as its variable carries it; raises naming ``source`` when it is not valid."""
    try:
        if name in _BOOLS:
            return "true" if as_bool(value, source) else "false"
        if name in _CHOICES:
            text = str(value).strip().upper()
            if text not in _CHOICES[name]:
                raise ValueError(f"{source}={value!r} is not one of {', '.join(_CHOICES[name])}")
            return text
        if name in ("version", "min_num_params"):
            number = int(value)
            if name == "version" and number not in (1, 2):
                raise ValueError(f"{source}={value!r} must be 1 or 2")
            return str(number)
    except (TypeError, ValueError) as exc:
        raise FSDPLaunchError(f"{exc}.") from None
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def resolve_fsdp(
    flags: Mapping[str, Any], config: LaunchConfig | None, config_path: str, num_processes: Any
) -> FSDPLaunch:
    """The FSDP variables for the children, or nothing when FSDP is off.

    Raises:
        FSDPLaunchError: an ``--fsdp_*`` flag without FSDP, or a value FSDP cannot take.
    """
    use = bool(flags.get("use_fsdp")) or (config is not None and config.distributed_type == "FSDP")
    stray = [f for f in flags if f.startswith("fsdp_") and flags[f] is not None]
    if not use:
        if stray:
            raise FSDPLaunchError(
                f"--{stray[0]} configures FSDP, which is off (no --use_fsdp and no distributed_type: FSDP), so it "
                f"would be ignored. Add --use_fsdp, or drop --{stray[0]}."
            )
        return FSDPLaunch()
    if flags.get("use_deepspeed") or (config is not None and config.distributed_type == "DEEPSPEED" and use):
        raise FSDPLaunchError(
            "FSDP (--use_fsdp / distributed_type: FSDP) and DeepSpeed (--use_deepspeed) both shard the model and "
            "cannot run together; keep one."
        )
    given = _given(flags, config, config_path)
    unknown = sorted(set(given) - set(FSDP_ENV))
    if unknown:
        raise FSDPLaunchError(
            f"Unknown FSDP setting(s) {unknown}; the known ones are fsdp_{', fsdp_'.join(FSDP_ENV)}."
        )
    values = {name: _check(name, value, source) for name, (value, source) in given.items()}
    version = int(values.get("version", "1"))
    if version == 2 and "sharding_strategy" in values:
        raise FSDPLaunchError(
            f"{given['sharding_strategy'][1]} is an FSDP1 setting, but fsdp_version is 2: use "
            "fsdp_reshard_after_forward instead (or run `accelerate to-fsdp2` on the config file)."
        )
    if version == 1 and "reshard_after_forward" in values:
        raise FSDPLaunchError(
            f"{given['reshard_after_forward'][1]} is an FSDP2 setting, but fsdp_version is 1: use "
            "fsdp_sharding_strategy, or set fsdp_version to 2."
        )
    launch = FSDPLaunch(env={USE_FSDP_ENV: "true"})
    launch.env.update({FSDP_ENV[name]: value for name, value in values.items()})
    strategy = values.get("sharding_strategy", "FULL_SHARD") if version == 1 else None
    reshard = None if "reshard_after_forward" not in values else values["reshard_after_forward"] == "true"
    after, mesh = fsdp2_layout(strategy, reshard)
    source = f"fsdp_version 1, sharding_strategy {strategy}" if version == 1 else "fsdp_version 2"
    layout = {"shard": "shard over all processes", "replicate": "replicate on every process (DDP-like)",
              "hybrid": "shard within a machine, replicate across machines"}[mesh]  # fmt: skip
    launch.notes.append(f"FSDP: {source} -> FSDP2 fully_shard(reshard_after_forward={after}), {layout}.")
    for name in (
        "backward_prefetch",
        "forward_prefetch",
        "use_orig_params",
        "activation_checkpointing_offload",
    ):
        if name in values and version == 1 and values[name] != "false":
            launch.notes.append(
                f"FSDP: fsdp_{name}={values[name]} is an FSDP1 setting that FSDP2 does without."
            )
    if num_processes is not None and int(num_processes) == 1:
        launch.notes.append(
            "FSDP: one process holds the whole model (nothing to shard); the script runs unsharded."
        )
    return launch


def launch_variables(launch: LaunchEnv) -> dict[str, str]:
    """The launcher's ``FSDP_*`` values, by variable, as the plugin reads them (from the one launch table)."""
    values = {variable: getattr(launch, f"fsdp_{key}") for key, variable in FSDP_ENV.items()}
    return {variable: value for variable, value in values.items() if value is not None}


def plugin_with_launch_env(
    plugin: FullyShardedDataParallelPlugin, launch: LaunchEnv
) -> FullyShardedDataParallelPlugin:
    """A copy of ``plugin`` whose unset fields take the launcher's ``FSDP_*`` values (``launch``, the
    settings read once): the runtime half of the translation above, run once when the run is resolved.

    A field counts as unset when it was left ``None`` at construction and still holds the default it
    got then (a later assignment is the caller's choice, as an argument is). The caller's plugin is
    not changed.
    """
    env = launch_variables(launch)
    resolved = copy.copy(plugin)
    unset = plugin._defaulted_fields()
    if any(FIELD_ENV[name] in env for name in unset):
        for name in unset:
            setattr(resolved, name, None)  # back to "not given", so the variable or the default applies
        resolved._settle(env)
    return resolved
