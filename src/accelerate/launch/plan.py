"""Turns config file < environment < flags into a :class:`LaunchPlan`, remembering where each came from.

The plan is pure data: it says what will run, with which environment, and why each setting has its
value. ``accelerate launch --dry_run`` prints it; :mod:`accelerate.launch.runner` executes it. Every
check that can refuse a launch runs here (from :mod:`accelerate.launch.checks`), before anything starts.

Nothing here imports torch at module level; the only torch use is counting visible GPUs when no
process count was given or GPUs were asked for (and none at all under ``--cpu``, or when no GPU
driver is present).
"""

from __future__ import annotations

import functools
import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelerate.backends.deepspeed import launch as deepspeed_launch
from accelerate.backends.fault_tolerance import launch as fault_tolerance_launch
from accelerate.config.config_file import ConfigLocation, LaunchConfig
from accelerate.config.env import ENV_CONTRACT, LaunchEnv, read_launch_env, write_launch_env
from accelerate.launch import cluster, commands, elastic, parallelism, xla
from accelerate.launch import fp8 as fp8_launch
from accelerate.launch.checks import (
    LaunchError,
    check_flag_pairs,
    check_ignored,
    check_unavailable,
    check_values,
    gpu_request,
)
from accelerate.launch.endpoint import resolve_endpoint
from accelerate.utils.ports import port_is_free


@dataclass(frozen=True)
class Setting:
    """One resolved value and where it came from: ``default``, ``config file PATH``, ``environment
    VAR`` or ``flag --NAME``."""

    name: str
    value: Any
    source: str

    @property
    def from_flag(self) -> bool:
        return self.source.startswith("flag ")

    @property
    def flag(self) -> str:
        """The flag that gave the value as the user typed it (``--nnodes`` for num_machines), else ``--NAME``."""
        return self.source.split(" ", 1)[1] if self.from_flag else f"--{self.name}"


@dataclass
class LaunchPlan:
    """Everything `accelerate launch` decided, ready to print (``--dry_run``) or run."""

    settings: dict[str, Setting]
    # "single": one child process; "torchrun": torch.distributed.run's elastic agent; "mpirun": mpirun
    # starts every process (``program`` is then the whole mpirun command); "xla": one child that has
    # torch_xla spawn a process per XLA device (see accelerate.launch.xla).
    mode: str
    program: list[str]  # what each process runs: python -u -m accelerate.launch.bootstrap script ...
    torchrun_args: list[str]  # torch.distributed.run's arguments (mode "torchrun"), program included
    child_env: dict[str, str]  # variables set (on top of the inherited environment) for every process
    config: ConfigLocation | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # said on every launch, dry run included
    launcher_env: dict[str, str] = field(default_factory=dict)  # for the launching command only (mpirun)

    def value(self, name: str) -> Any:
        return self.settings[name].value

    @property
    def command(self) -> list[str]:
        """The equivalent command line (what a user could paste to run the same thing by hand)."""
        if self.mode in ("single", "mpirun", "xla"):
            return list(self.program)
        return [sys.executable, "-m", "torch.distributed.run", *self.torchrun_args]

    def describe(self) -> str:
        """The ``--dry_run`` report: each setting with its source, the child environment, the command."""
        lines = [f"Config file: {self.config.description if self.config else 'not used'}", ""]
        width = max(len(name) for name in self.settings) + 2
        vwidth = max(len(_show(s.value)) for s in self.settings.values()) + 2
        lines.append(f"{'setting':<{width}}{'value':<{vwidth}}source")
        for setting in self.settings.values():
            lines.append(f"{setting.name:<{width}}{_show(setting.value):<{vwidth}}{setting.source}")
        lines += ["", "Environment set for every process:"]
        lines += [f"  {key}={val}" for key, val in sorted(self.child_env.items())] or ["  (nothing)"]
        if self.mode == "torchrun":
            lines.append("  (plus RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ... from torchrun)")
        if self.mode == "mpirun":
            lines.append("  (plus the MPI implementation's rank variables, from mpirun)")
        for key, val in sorted(self.launcher_env.items()):
            lines.append(f"  {key}={val} (for mpirun itself)")
        how = {"single": "one process", "torchrun": "torch.distributed.run", "mpirun": "mpirun",
               "xla": "torch_xla spawn"}[self.mode]  # fmt: skip
        mesh = parallelism.mesh_lines(self.settings)
        lines += ["", *mesh] if mesh else []
        lines += ["", f"Command ({how}):"]
        lines.append("  " + shlex.join(self.command))
        lines += [f"Note: {note}" for note in self.notes]
        lines += [f"Warning: {warning}" for warning in self.warnings]
        return "\n".join(lines)


def _show(value: Any) -> str:
    return "-" if value is None else str(value)


# --- the settings table ------------------------------------------------------------------------
def _config_cpu(config: LaunchConfig) -> bool | None:
    if config.use_cpu:
        return True
    if config.distributed_type == "MULTI_CPU":
        return True
    return config.use_cpu


def _config_multi_gpu(config: LaunchConfig) -> bool | None:
    return True if config.distributed_type == "MULTI_GPU" else None


def _config_xla(config: LaunchConfig) -> bool | None:
    return True if config.distributed_type == "XLA" else None


def _config_downcast(config: LaunchConfig) -> bool | None:
    # upstream's `accelerate config` writes downcast_bf16: 'no' / 'yes'
    value = config.downcast_bf16
    return True if str(value).strip().lower() in ("yes", "true", "1") else None


def _dynamo(key: str, lower: bool = False) -> Callable[[LaunchConfig], Any]:
    def read(config: LaunchConfig) -> Any:
        value = (config.dynamo_config or {}).get(key)
        return str(value).lower() if lower and value is not None else value

    return read


def _attr(key: str) -> Callable[[LaunchConfig], Any]:
    return lambda config: getattr(config, key)


def _mpirun(key: str) -> Callable[[LaunchConfig], Any]:
    return lambda config: (config.mpirun_config or {}).get(key)


def _config_use_deepspeed(config: LaunchConfig) -> bool | None:
    return True if config.distributed_type == "DEEPSPEED" else None


def _deepspeed(key: str) -> Callable[[LaunchConfig], Any]:
    """A ``deepspeed_config`` key, read only when the file's distributed_type is DEEPSPEED."""
    return lambda config: deepspeed_launch.config_file_value(config, key)


# DeepSpeed's settings in the env contract: written for the children only when DeepSpeed is on.
_DEEPSPEED_ENV = deepspeed_launch.DEEPSPEED_ENV


@dataclass(frozen=True)
class _Spec:
    name: str
    default: Any
    config: Callable[[LaunchConfig], Any] | None = None
    env_field: str | None = None  # a LaunchEnv field (the ACCELERATE_* contract)


# One setting per line, so the table reads as a table (the formatter leaves it as written).
# fmt: off
_SPECS: tuple[_Spec, ...] = (
    _Spec("cpu", False, _config_cpu, "cpu"),
    _Spec("multi_gpu", False, _config_multi_gpu),
    _Spec("num_processes", None, _attr("num_processes")),
    _Spec("num_machines", 1, _attr("num_machines")),
    _Spec("nnodes", None),  # "MIN:MAX" for an elastic range (launch/elastic.py)
    _Spec("machine_rank", 0, _attr("machine_rank")),
    _Spec("main_process_ip", None, _attr("main_process_ip")),
    _Spec("main_process_port", None, _attr("main_process_port")),
    _Spec("rdzv_backend", "static", _attr("rdzv_backend")),
    _Spec("same_network", True, _attr("same_network")),
    _Spec("rdzv_conf", None),
    _Spec("max_restarts", 0),
    _Spec("monitor_interval", 0.1),
    _Spec("gpu_ids", "all", _attr("gpu_ids")),
    _Spec("mixed_precision", "no", _attr("mixed_precision"), "mixed_precision"),
    _Spec("gradient_accumulation_steps", None, _deepspeed("gradient_accumulation_steps"), "gradient_accumulation_steps"),
    _Spec("debug", False, _attr("debug"), "debug"),
    _Spec("dynamo_backend", "no", _dynamo("dynamo_backend", lower=True), "dynamo_backend"),
    _Spec("dynamo_mode", None, _dynamo("dynamo_mode"), "dynamo_mode"),
    _Spec("dynamo_use_fullgraph", None, _dynamo("dynamo_use_fullgraph"), "dynamo_use_fullgraph"),
    _Spec("dynamo_use_dynamic", None, _dynamo("dynamo_use_dynamic"), "dynamo_use_dynamic"),
    _Spec("dynamo_use_regional_compilation", None, _dynamo("dynamo_use_regional_compilation"),
          "dynamo_use_regional_compilation"),  # fmt: skip
    _Spec("num_cpu_threads_per_process", None),
    _Spec("tee", None),
    _Spec("log_dir", None),
    _Spec("role", None),
    _Spec("mpirun_hostfile", None, _mpirun("mpirun_hostfile")),
    _Spec("mpirun_ccl", None, _mpirun("mpirun_ccl")),
    _Spec("tpu", False, _config_xla),
    _Spec("main_training_function", "main", _attr("main_training_function")),
    _Spec("downcast_bf16", None, _config_downcast, "downcast_bf16"),
    _Spec("use_deepspeed", None, _config_use_deepspeed, "use_deepspeed"),
    *(_Spec(name, None, _deepspeed(name), name) for name in _DEEPSPEED_ENV),
    _Spec("deepspeed_multinode_launcher", None, _deepspeed("deepspeed_multinode_launcher")),
    *(_Spec(*row) for row in parallelism.SPEC_ROWS),
    *(_Spec(*row) for row in fp8_launch.SPEC_ROWS),
    *(_Spec(*row) for row in fault_tolerance_launch.SPEC_ROWS),
)
# fmt: on
# Options of torch.distributed.run's agent: asking for one runs even a single process under torchrun.
_TORCHRUN_ONLY = commands.TORCHRUN_ONLY
_ENV_NAME = {var.field: var.name for var in ENV_CONTRACT}


def _resolve(
    flags: Mapping[str, Any],
    config: LaunchConfig | None,
    config_path: str,
    env: LaunchEnv,
    typed: Mapping[str, str],
) -> dict[str, Setting]:
    settings: dict[str, Setting] = {}
    for spec in _SPECS:
        setting = Setting(spec.name, spec.default, "default")
        if config is not None and spec.config is not None:
            value = spec.config(config)
            if value is not None:
                setting = Setting(spec.name, value, f"config file {config_path}")
        if spec.env_field is not None:
            value = getattr(env, spec.env_field)
            if value is not None:
                setting = Setting(spec.name, value, f"environment {_ENV_NAME[spec.env_field]}")
        if flags.get(spec.name) is not None:
            setting = Setting(spec.name, flags[spec.name], f"flag {typed.get(spec.name, '--' + spec.name)}")
        settings[spec.name] = setting
    return settings


# --- helpers the CLI and tests can replace ---------------------------------------------------------
def visible_gpu_count(environ: Mapping[str, str]) -> int:
    """GPUs the children would see. Avoids importing torch when the answer is plainly zero."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    if not (
        Path("/proc/driver/nvidia").exists() or Path("/dev/nvidia0").exists() or Path("/dev/kfd").exists()
    ):
        return 0
    import torch

    return int(torch.cuda.device_count())


# --- building the plan -------------------------------------------------------------------------------
def build_plan(
    *,
    script: str,
    script_args: Sequence[str] = (),
    flags: Mapping[str, Any] | None = None,
    config: LaunchConfig | None = None,
    config_location: ConfigLocation | None = None,
    module: bool = False,
    no_python: bool = False,
    environ: Mapping[str, str] | None = None,
    gpu_count: Callable[[], int] | None = None,
    check_port: Callable[[int], bool] | None = port_is_free,
    dry_run: bool = False,
) -> LaunchPlan:
    """Resolves every setting (config file < environment < flags), validates, and builds the plan.

    Args:
        script: the training script (or module with ``module=True``, or executable with ``no_python``).
        flags: the launch flags the user gave, by setting name; ``None`` values mean "not given".
        config: the loaded config file, if any, and ``config_location`` where it was found.
        environ: the launcher's environment (default ``os.environ``); only the ACCELERATE_* contract
            variables, OMP_NUM_THREADS / CUDA_VISIBLE_DEVICES and, for a launcher that Slurm's srun or
            MPI started on each machine, their variables (:mod:`accelerate.launch.cluster`) are read.
        gpu_count: how many GPUs are visible (injected by tests); called only when needed.
        check_port: whether a port is free on this machine; ``None`` skips the check.
        dry_run: the plan is only printed (``--dry_run``): a busy ``main_process_port`` is a warning,
            not an error, since nothing will listen on it.

    Raises:
        LaunchError: contradictory or ignored flags, unavailable backends, impossible values.
    """
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    typed = elastic.typed_flags(given)  # --nnodes is the source of num_machines, not --num_machines
    flags = elastic.normalise_machine_flags(given)
    env = os.environ if environ is None else environ
    config_path = str(config_location.path) if config_location and config_location.path else "<config>"
    config_warnings = check_unavailable(flags, config, config_path)
    check_flag_pairs(flags, module, no_python)

    settings = _resolve(flags, config, config_path, read_launch_env(env), typed)
    count_gpus = functools.cache(gpu_count or (lambda: visible_gpu_count(env)))
    # Under Slurm or MPI (one launcher per machine) the allocation answers what nothing else gave.
    notes, cluster_warnings = cluster.apply_allocation(settings, env, count_gpus)
    _resolve_num_processes(settings, env, count_gpus)
    check_values(settings)
    fp8_problem = fp8_launch.check_fp8(settings)
    if fp8_problem is not None:
        raise LaunchError(fp8_problem)
    warnings = [*config_warnings, *cluster_warnings, *_fall_back_to_cpu(settings, count_gpus)]
    parallelism.check_parallelism(settings)  # after the CPU fallback: context parallelism needs GPUs
    if problem := fault_tolerance_launch.problem(settings):
        raise LaunchError(problem)
    mode = _mode(settings)
    if mode == "xla":
        xla.check_settings(settings)
    else:
        check_ignored(settings, mode)
    if mode not in ("single", "xla"):
        warnings += resolve_endpoint(settings, notes, check_port, dry_run=dry_run)
    if mode == "torchrun":
        elastic.check_elastic_rendezvous(settings, notes)
        endpoint = elastic.endpoint_note(settings)
        notes += [endpoint] if endpoint else []
        _rendezvous_for_restarts(settings, notes)

    program = commands.program(script, script_args, module, no_python)
    child_env = _child_env(settings, env, mode)
    fsdp = _fsdp(flags, config, config_path, settings["num_processes"].value)
    child_env.update(fsdp.env)
    notes += fsdp.notes
    if mode == "xla":
        program = xla.spawn_program(settings, script, script_args, module, no_python)
        child_env.update(xla.xla_env(settings))
    torchrun_args = (
        commands.torchrun_args(settings, script, script_args, module, no_python) if mode == "torchrun" else []
    )
    launcher_env: dict[str, str] = {}
    if mode == "mpirun":
        program, launcher_env = commands.mpirun_program(settings, child_env, program, env)
    return LaunchPlan(
        settings, mode, program, torchrun_args, child_env, config_location, notes, warnings, launcher_env
    )


def _fsdp(flags: Mapping[str, Any], config: LaunchConfig | None, path: str, procs: Any) -> Any:
    from accelerate.backends.fsdp.launch import FSDPLaunchError, resolve_fsdp

    try:
        return resolve_fsdp(flags, config, path, procs)
    except FSDPLaunchError as exc:
        raise LaunchError(str(exc)) from None


def _rendezvous_for_restarts(settings: dict[str, Setting], notes: list[str]) -> None:
    """Restarts need a rendezvous that can form the group again.

    torch.distributed.run's static rendezvous cannot: after a failure the restarted workers wait
    forever in init_process_group (torch 2.x, also with plain torchrun). c10d can, so it is used when
    the backend was not chosen; a static backend chosen explicitly together with restarts is refused.
    """
    restarts, backend = settings["max_restarts"], settings["rdzv_backend"]
    if int(restarts.value) == 0 or str(backend.value) != "static":
        return
    if backend.source != "default":
        raise LaunchError(
            f"max_restarts={restarts.value} (from {restarts.source}) with rdzv_backend=static (from "
            f"{backend.source}): torch.distributed.run's static rendezvous cannot re-form the group after a "
            "restart, so the restarted processes would hang. Use --rdzv_backend c10d, or leave it out."
        )
    settings["rdzv_backend"] = Setting("rdzv_backend", "c10d", "default (c10d: --max_restarts needs it)")
    notes.append("rdzv_backend: c10d, since the static rendezvous cannot restart processes.")


def _mode(settings: dict[str, Setting]) -> str:
    if settings["tpu"].value:
        return "xla"
    if settings["mpirun_hostfile"].value:
        return "mpirun"
    if settings["num_processes"].value == 1 and settings["num_machines"].value == 1:
        return "torchrun" if any(settings[name].value is not None for name in _TORCHRUN_ONLY) else "single"
    return "torchrun"


def _fall_back_to_cpu(settings: dict[str, Setting], gpu_count: Callable[[], int]) -> list[str]:
    """GPUs asked for (--multi_gpu, distributed_type: MULTI_GPU, gpu_ids) where none is visible.

    A warning, not an error: a config file written on a GPU machine (`accelerate config` there) is
    routinely carried to a laptop or a CPU CI runner, and the same script should still run there,
    with the same number of processes (so the same global batch), on CPU. What would be wrong is
    doing it silently, so one line names the setting and says CPU processes are used; the run is
    then an ordinary CPU run (ACCELERATE_USE_CPU, gloo), and --dry_run shows the same line.
    """
    asked = gpu_request(settings)
    if not asked or gpu_count() > 0:
        return []
    settings["cpu"] = Setting("cpu", True, "default (no GPU visible)")
    procs = settings["num_processes"].value
    return [
        f"{' and '.join(asked)} asks for GPUs, but no GPU is visible on this machine; running {procs} CPU "
        f"process{'es' if int(procs) > 1 else ''} instead."
    ]


def _resolve_num_processes(
    settings: dict[str, Setting], environ: Mapping[str, str], gpu_count: Callable[[], int]
) -> None:
    current = settings["num_processes"]
    if current.value is not None:
        return
    if settings["tpu"].value:
        # torch_xla spawns 1 process or one per device; 1 is the choice that runs everywhere.
        settings["num_processes"] = Setting(
            "num_processes", 1, "default (one XLA device; --num_processes N for N)"
        )
        return
    gpu_ids = settings["gpu_ids"].value
    if settings["cpu"].value:
        settings["num_processes"] = Setting("num_processes", 1, "default")
    elif gpu_ids not in (None, "all"):
        count = len([g for g in str(gpu_ids).split(",") if g.strip()])
        settings["num_processes"] = Setting(
            "num_processes", count, f"default (one per id in gpu_ids={gpu_ids})"
        )
    else:
        count = gpu_count()
        seen = "no GPU visible" if count == 0 else f"{count} visible GPU{'s' if count > 1 else ''}"
        settings["num_processes"] = Setting("num_processes", max(count, 1), f"default ({seen})")


def _child_env(settings: dict[str, Setting], environ: Mapping[str, str], mode: str) -> dict[str, str]:
    contract_fields = {var.field for var in ENV_CONTRACT}
    values = {name: s.value for name, s in settings.items() if name in contract_fields}
    if not settings["use_deepspeed"].value:  # its settings reach the children only with DeepSpeed on
        values = {name: v for name, v in values.items() if name not in _DEEPSPEED_ENV}
    # The parallelism sizes reach the children only with --use_parallelism_config (upstream's rule).
    values = {name: v for name, v in values.items() if name not in parallelism.SETTINGS}
    values.update(parallelism.child_env_values({name: settings[name].value for name in parallelism.SETTINGS}))
    values = fp8_launch.child_env_values(values)  # ACCELERATE_FP8_* only for an fp8 run
    if values.get("dynamo_backend") == "no":
        values["dynamo_backend"] = "no"
    out = write_launch_env(values)
    threads = settings["num_cpu_threads_per_process"].value
    if threads is not None:
        out["OMP_NUM_THREADS"] = str(threads)
    elif mode not in ("single", "xla") and "OMP_NUM_THREADS" not in environ:
        # Several processes each using every core thrash the machine; one thread each is the safe start.
        out["OMP_NUM_THREADS"] = "1"
    gpu_ids = settings["gpu_ids"].value
    if gpu_ids not in (None, "all") and not settings["cpu"].value:
        out["CUDA_VISIBLE_DEVICES"] = str(gpu_ids)
    if settings["use_deepspeed"].value and settings["cpu"].value:
        out["DS_ACCELERATOR"] = "cpu"  # DeepSpeed would pick CUDA on a GPU machine
    if settings["mpirun_ccl"].value is not None:
        # mpirun_config.mpirun_ccl: how many Intel oneCCL worker threads each process runs.
        out["CCL_WORKER_COUNT"] = str(settings["mpirun_ccl"].value)
    return out
