"""The launcher's N-D parallelism settings: ``--use_parallelism_config``, its ``--parallelism_config_*``
flags and a config file's ``parallelism_config`` section, checked and turned into the children's
``ACCELERATE_USE_PARALLELISM_CONFIG`` / ``PARALLELISM_CONFIG_*`` variables (upstream's names).

In the child, :mod:`accelerate.state.parallelism_env` builds the run's ``ParallelismConfig`` from
them when the script passes none. ``--dry_run`` prints the device mesh these sizes describe, and
which process holds which coordinates, by arithmetic alone (no process group is formed).

Pure: no torch, no ``os.environ`` (the plan passes what it read).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from accelerate.launch.checks import LaunchError

if TYPE_CHECKING:
    from accelerate.config.config_file import LaunchConfig
    from accelerate.launch.plan import Setting

# The mesh dimensions, outermost first: the order ParallelismConfig lists them in (and hands
# init_device_mesh), so a rank's coordinates here are the ones its DeviceMesh will report.
MESH_DIMS = ("dp_replicate", "dp_shard", "cp", "sp", "tp")
# Beyond upstream: pipeline stages, after the data-parallel dimensions (ParallelismConfig's order),
# listed only when in use (pp_size > 1).
PIPELINE_DIM = "pp"
# Beyond upstream: expert parallelism splits dp_shard (adds no process); shown only when in use.
EXPERT_DIM = "ep"
# Every upstream parallelism flag and its default (upstream's argparse defaults). The flag name is
# the config file's key inside ``parallelism_config`` and the env-contract field.
DEFAULTS: dict[str, Any] = {
    "parallelism_config_dp_replicate_size": 1,
    "parallelism_config_dp_shard_size": 1,
    "parallelism_config_tp_size": 1,
    "parallelism_config_cp_size": 1,
    "parallelism_config_cp_backend": "torch",
    "parallelism_config_cp_comm_strategy": "allgather",
    "parallelism_config_sp_size": 1,
    "parallelism_config_sp_backend": "deepspeed",
    "parallelism_config_sp_seq_length": None,
    "parallelism_config_sp_seq_length_is_variable": True,
    "parallelism_config_sp_attn_implementation": "sdpa",
    # Beyond upstream: pipeline-parallel training (ParallelismConfig.pp_size / pp_schedule).
    "parallelism_config_pp_size": 1,
    "parallelism_config_pp_schedule": "1F1B",
    # Beyond upstream: expert parallelism (ParallelismConfig.ep_size), carved from dp_shard.
    "parallelism_config_ep_size": 1,
    "parallelism_config_pp_microbatches": None,  # one per stage (pp_size)
}
SETTINGS = ("use_parallelism_config", *DEFAULTS)
_CHOICES = {
    "parallelism_config_cp_backend": ("torch",),
    "parallelism_config_cp_comm_strategy": ("allgather", "alltoall"),
    "parallelism_config_sp_backend": ("deepspeed", "torch"),
    "parallelism_config_pp_schedule": ("GPipe", "1F1B", "Interleaved1F1B"),
}
_CPU_CP = (
    "context parallelism shards attention with torch's ring attention, which has no CPU kernel (its CPU "
    "flash-attention op has no sharding strategy)"
)


def size_name(dim: str) -> str:
    return f"parallelism_config_{dim}_size"


def _config_value(key: str) -> Callable[[LaunchConfig], Any]:
    return lambda config: (config.parallelism_config or {}).get(key)


def _config_uses(config: LaunchConfig) -> bool | None:
    # A config file with a parallelism_config section asks for it (upstream's questionnaire writes the
    # section only when asked to use one), as --use_parallelism_config does on the command line.
    return True if config.parallelism_config else None


# (name, default, config-file reader, env-contract field): the plan's settings-table rows.
SPEC_ROWS: tuple[tuple[str, Any, Callable[[LaunchConfig], Any], str], ...] = (
    ("use_parallelism_config", None, _config_uses, "use_parallelism_config"),
    *((name, default, _config_value(name), name) for name, default in DEFAULTS.items()),
)


def in_use(settings: Mapping[str, Setting]) -> bool:
    return bool(settings["use_parallelism_config"].value)


def sizes(settings: Mapping[str, Setting]) -> dict[str, int]:
    """Each mesh dimension's size, outermost first (call after :func:`check_parallelism`); ``pp`` only
    when a pipeline is asked for."""
    pp = int(settings[size_name(PIPELINE_DIM)].value)
    dims = [*MESH_DIMS[:2], PIPELINE_DIM, *MESH_DIMS[2:]] if pp > 1 else MESH_DIMS
    return {dim: int(settings[size_name(dim)].value) for dim in dims}


def _where(setting: Setting) -> str:
    return f"{setting.name}={setting.value} (from {setting.source})"


def check_parallelism(settings: dict[str, Setting]) -> None:
    """Refuses parallelism settings that cannot run as given, before any process starts.

    Normalises the values in ``settings`` (sizes to ints, the switch to a bool) as it goes.
    """
    from accelerate.config.env import parse_bool

    if not in_use(settings):
        for name in DEFAULTS:
            if settings[name].from_flag:
                raise LaunchError(
                    f"--{name} sets a ParallelismConfig size, but --use_parallelism_config is off (not given, and "
                    "the config file has no parallelism_config section), so it would be ignored. Add "
                    f"--use_parallelism_config, or drop --{name}."
                )
        return
    for dim in (PIPELINE_DIM, EXPERT_DIM, *MESH_DIMS):
        setting = settings[size_name(dim)]
        try:
            value = int(setting.value)
        except (TypeError, ValueError):
            value = 0
        if isinstance(setting.value, bool) or value < 1:
            raise LaunchError(f"{_where(setting)} must be a whole number of processes, at least 1.")
        settings[setting.name] = dataclasses.replace(setting, value=value)
    for name, allowed in _CHOICES.items():
        setting = settings[name]
        if str(setting.value) not in allowed:
            raise LaunchError(f"{_where(setting)} must be one of: {', '.join(allowed)}.")
    variable = settings["parallelism_config_sp_seq_length_is_variable"]
    if isinstance(variable.value, str):
        try:
            settings[variable.name] = dataclasses.replace(
                variable, value=parse_bool(variable.name, variable.value)
            )
        except ValueError:
            raise LaunchError(f"{_where(variable)} must be true or false.") from None
    _check_combinations(settings)


def _check_combinations(settings: dict[str, Setting]) -> None:
    size = sizes(settings)
    cp, sp, tp = (settings[size_name(dim)] for dim in ("cp", "sp", "tp"))
    # A pair that cannot compose at any process count is named first.
    if size["sp"] > 1 and size["tp"] > 1:
        raise LaunchError(
            f"{_where(sp)} and {_where(tp)}: sequence parallelism (Ulysses) and tensor parallelism both split the "
            "attention heads and do not compose here; set one of them to 1 (give the processes to "
            "parallelism_config_dp_shard_size instead)."
        )
    procs = settings["num_processes"]
    total = 1
    for value in size.values():
        total *= value
    if total != int(procs.value):
        named = ", ".join(f"{dim}={value}" for dim, value in size.items())
        raise LaunchError(
            f"The parallelism sizes multiply to {total} processes ({named}), but num_processes={procs.value} "
            f"(from {procs.source}). Their product must be the number of processes: change a size, or launch "
            f"{total} processes with --num_processes {total}."
        )
    cpu = settings["cpu"]
    if size["cp"] > 1 and cpu.value:
        raise LaunchError(
            f"{_where(cp)} on CPU processes (cpu=True, from {cpu.source}): {_CPU_CP}. Run context parallelism on "
            "GPUs, or set parallelism_config_cp_size to 1 (tensor parallelism and data parallelism run on CPU)."
        )
    if size["cp"] > 1 and size["sp"] > 1:
        raise LaunchError(
            f"{_where(cp)} and {_where(sp)}: context and sequence parallelism split the same sequence "
            "dimension; set one of them to 1."
        )
    _check_experts(settings, size)
    deepspeed = settings["use_deepspeed"]
    if size["sp"] > 1:
        _settle_sp_backend(settings, sp, deepspeed)
    if size.get("pp", 1) > 1 and deepspeed.value:
        pp = settings[size_name("pp")]
        raise LaunchError(
            f"{_where(pp)} with DeepSpeed (use_deepspeed, from {deepspeed.source}): DeepSpeed's engine runs the "
            "whole model's forward and backward and cannot run torch's pipeline schedules. Drop --use_deepspeed, "
            "or set parallelism_config_pp_size to 1."
        )
    if size["tp"] > 1 and deepspeed.value:
        raise LaunchError(
            f"{_where(tp)} with DeepSpeed (use_deepspeed, from {deepspeed.source}): tensor parallelism composes "
            "with FSDP on one device mesh, not with DeepSpeed's ZeRO. Drop --use_deepspeed (use "
            "--parallelism_config_dp_shard_size with --use_fsdp to shard as well), or set "
            "parallelism_config_tp_size to 1."
        )


def _check_experts(settings: dict[str, Setting], size: Mapping[str, int]) -> None:
    """``ep`` is carved from ``dp_shard``: it must divide it and composes with nothing that splits a batch."""
    ep = settings[size_name(EXPERT_DIM)]
    if int(ep.value) <= 1:
        return
    for dim in ("cp", "sp", "pp"):
        if size.get(dim, 1) > 1:
            raise LaunchError(
                f"{_where(ep)} and {_where(settings[size_name(dim)])}: ep with {dim} is not supported yet (expert "
                f"parallelism composes with dp_shard, dp_replicate and tp); set parallelism_config_{dim}_size to 1."
            )
    shard = settings[size_name("dp_shard")]
    if size["dp_shard"] % int(ep.value):
        raise LaunchError(
            f"{_where(ep)} and {_where(shard)}: expert parallelism is carved from the data-parallel shard dimension, "
            f"so ep_size must divide dp_shard_size. Use an ep_size that divides {shard.value}."
        )


def _settle_sp_backend(settings: dict[str, Setting], sp: Setting, deepspeed: Setting) -> None:
    """Which Ulysses runs ``sp``: an unset backend follows the engine (DeepSpeed's own with
    --use_deepspeed, as upstream; the native one otherwise); one that was set must match it."""
    backend = settings["parallelism_config_sp_backend"]
    wanted = "deepspeed" if deepspeed.value else "torch"
    if backend.source == "default":
        settings[backend.name] = dataclasses.replace(
            backend, value=wanted, source="default (follows use_deepspeed)"
        )
    elif backend.value != wanted:
        engine = "DeepSpeed is on" if deepspeed.value else "DeepSpeed is off"
        raise LaunchError(
            f"{_where(backend)} with {_where(sp)}, but {engine} (use_deepspeed, from {deepspeed.source}). Use "
            f"parallelism_config_sp_backend {wanted}, or leave it unset to follow the engine."
        )


def child_env_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The contract fields a child gets: every parallelism setting with the switch on, none without it.

    Context-, sequence- and pipeline-parallel options go only where that dimension is in use, as upstream does
    (a handler set for a size-1 dimension makes ParallelismConfig warn).
    """
    if not values.get("use_parallelism_config"):
        return {}
    out = {name: values.get(name, default) for name, default in DEFAULTS.items()}
    out["use_parallelism_config"] = True
    if int(out["parallelism_config_cp_size"]) <= 1:
        del out["parallelism_config_cp_comm_strategy"]
    if int(out["parallelism_config_pp_size"]) <= 1:  # beyond upstream: its variables only when in use
        del out["parallelism_config_pp_size"], out["parallelism_config_pp_schedule"]
        del out["parallelism_config_pp_microbatches"]
    elif out["parallelism_config_pp_microbatches"] is None:  # unset: one per stage, decided by the child
        del out["parallelism_config_pp_microbatches"]
    if int(out["parallelism_config_ep_size"]) <= 1:  # beyond upstream: only when in use
        del out["parallelism_config_ep_size"]
    if int(out["parallelism_config_sp_size"]) <= 1:
        for name in ("sp_seq_length", "sp_seq_length_is_variable", "sp_attn_implementation"):
            del out[f"parallelism_config_{name}"]
    return out


# --- the mesh, by arithmetic ----------------------------------------------------------------------
def mesh_coordinates(shape: Mapping[str, int], rank: int) -> dict[str, int]:
    """``rank``'s coordinate along each dimension of a row-major mesh (the last dimension varies fastest).

    Ranks fill ``init_device_mesh``'s mesh as ``arange(world).view(shape)``: for sizes
    ``dp_shard=2, tp=2`` rank 1 is ``(dp_shard 0, tp 1)`` and rank 2 is ``(dp_shard 1, tp 0)``.

    Example:
        >>> mesh_coordinates({"dp_shard": 2, "tp": 2}, 2)
        {'dp_shard': 1, 'tp': 0}
    """
    coords: dict[str, int] = {}
    rest = rank
    for dim in reversed(list(shape)):
        rest, coords[dim] = divmod(rest, shape[dim])
    if rest:
        raise ValueError(f"rank {rank} is outside a mesh of {dict(shape)} ({_product(shape)} processes).")
    return {dim: coords[dim] for dim in shape}


def _product(shape: Mapping[str, int]) -> int:
    total = 1
    for value in shape.values():
        total *= value
    return total


_MAX_ROWS = 64  # enough for 8 machines of 8 GPUs; beyond that the pattern is clear and the table long


def mesh_lines(settings: Mapping[str, Setting]) -> list[str]:
    """The ``--dry_run`` report of the device mesh: each dimension's size, and each process's coordinates.

    Every process of one data-parallel rank (the ``dp rank`` column) reads the same batches; the
    others (tensor, context parallel) split the model or the sequence between them.
    """
    if not in_use(settings):
        return []
    shape = sizes(settings)
    active = [dim for dim, value in shape.items() if value > 1]
    named = "  ".join(f"{dim}={value}" for dim, value in shape.items())
    ep = int(settings[size_name(EXPERT_DIM)].value)
    if ep > 1:  # no dimension of its own: the inner factor of dp_shard
        named += f"  (ep={ep} within dp_shard)"
    lines = [
        "Device mesh (ParallelismConfig, outermost dimension first):",
        f"  {named}  ->  mesh dims: {', '.join(active) if active else '(none: one process per replica)'}",
    ]
    columns = [dim for dim in shape if dim != "sp" or shape["sp"] > 1]
    if ep > 1:  # the inner factor of dp_shard: which slice of every layer's experts the process holds
        columns.insert(columns.index("dp_shard") + 1, EXPERT_DIM)
    per_machine = int(settings["num_processes"].value) // max(int(settings["num_machines"].value), 1)
    machines = int(settings["num_machines"].value) > 1
    header = ["rank", *(["machine"] if machines else []), *columns, "dp rank"]
    rows = []
    world = _product(shape)
    for rank in range(min(world, _MAX_ROWS)):
        coords = mesh_coordinates(shape, rank)
        coords[EXPERT_DIM] = coords["dp_shard"] % ep
        dp_rank = coords["dp_replicate"] * shape["dp_shard"] + coords["dp_shard"]
        machine = [str(rank // per_machine)] if machines else []
        rows.append([str(rank), *machine, *(str(coords[dim]) for dim in columns), str(dp_rank)])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines += [
        "  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths)).rstrip()
        for row in [header, *rows]
    ]
    if world > _MAX_ROWS:
        lines.append(f"  ... ({world - _MAX_ROWS} more processes, in the same row-major order)")
    return lines + _stage_lines(settings, shape)


def _stage_lines(settings: Mapping[str, Setting], shape: Mapping[str, int]) -> list[str]:
    """Which pipeline stages the processes of each ``pp`` coordinate hold (interleaved: two each)."""
    pp = shape.get(PIPELINE_DIM, 1)
    if pp <= 1:
        return []
    schedule = str(settings["parallelism_config_pp_schedule"].value)
    per_rank = 2 if schedule == "Interleaved1F1B" else 1
    lines = [f"Pipeline stages ({schedule}, {pp * per_rank} stages; the model is cut at the first batch):"]
    world = _product(shape)
    for coord in range(pp):
        ranks = [r for r in range(world) if mesh_coordinates(shape, r)["pp"] == coord]
        stages = ", ".join(str(coord + k * pp) for k in range(per_rank))
        label = "stages" if per_rank > 1 else "stage"
        lines.append(f"  pp {coord}: {label} {stages} on ranks {', '.join(map(str, ranks))}")
    return lines
