"""Every check that can refuse a launch: unavailable backends, contradictory or ignored flags, bad values.

Split from :mod:`accelerate.launch.plan`, which resolves the settings these checks read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelerate.config.config_file import LaunchConfig
    from accelerate.launch.plan import Setting

# Backends the config schema knows but this package does not run yet. Refusing is better than
# silently training with plain DDP on a config that asked for sharding.
_UNAVAILABLE_FLAGS = {
    "use_deepspeed": "DeepSpeed",
    "use_fsdp": "FSDP",
    "tpu": "TPU/XLA",
    "use_megatron_lm": "Megatron-LM",
    "enable_cpu_affinity": "CPU affinity",
}
_UNAVAILABLE_TYPES = {
    "DEEPSPEED": "DeepSpeed",
    "FSDP": "FSDP",
    "XLA": "TPU/XLA",
    "MEGATRON_LM": "Megatron-LM",
    "MULTI_NPU": "Ascend NPU",
    "MULTI_MLU": "Cambricon MLU",
    "MULTI_SDAA": "SDAA",
    "MULTI_MUSA": "MUSA",
    "MULTI_HPU": "Gaudi HPU",
}


class LaunchError(ValueError):
    """A launch request that cannot run as asked; the message names the flags and the fix."""


def check_unavailable(flags: Mapping[str, Any], config: LaunchConfig | None, config_path: str) -> None:
    for flag, what in _UNAVAILABLE_FLAGS.items():
        if flags.get(flag):
            raise LaunchError(
                f"--{flag}: {what} is not available in this version of accelerate yet. Drop --{flag} to "
                "run with plain data parallelism (DDP), knowing that it does not shard the model."
            )
    if config is None:
        return
    if config.distributed_type in _UNAVAILABLE_TYPES:
        what = _UNAVAILABLE_TYPES[config.distributed_type]
        raise LaunchError(
            f"The config file {config_path} sets distributed_type: {config.distributed_type}, but {what} is "
            "not available in this version of accelerate yet. Write a config without it (`accelerate config`) "
            "or pass another one with --config_file."
        )
    if config.mpirun_config and config.mpirun_config.get("mpirun_hostfile"):
        raise LaunchError(
            f"The config file {config_path} sets mpirun_config.mpirun_hostfile: launching through mpirun is not "
            "available in this version of accelerate yet. Remove mpirun_config and run `accelerate launch` on "
            "each machine with --num_machines/--machine_rank/--main_process_ip (torch.distributed.run), or start "
            "the processes with mpirun yourself: the runtime reads Open MPI / MPICH / Intel MPI variables."
        )
    if config.compute_environment == "AMAZON_SAGEMAKER":
        raise LaunchError(
            f"The config file {config_path} sets compute_environment: AMAZON_SAGEMAKER; launching on SageMaker "
            "is not available in this version of accelerate. Use a LOCAL_MACHINE config."
        )
    if config.enable_cpu_affinity:
        raise LaunchError(
            f"The config file {config_path} sets enable_cpu_affinity: true, which is not available in this "
            "version of accelerate yet. Set it to false."
        )


def check_flag_pairs(flags: Mapping[str, Any], module: bool, no_python: bool) -> None:
    pairs = (("cpu", "multi_gpu"), ("cpu", "gpu_ids"))
    for first, second in pairs:
        if flags.get(first) and flags.get(second) is not None and flags.get(second) is not False:
            raise LaunchError(
                f"--{first} and --{second} contradict each other: --{first} runs on CPU only, --{second} "
                "asks for GPUs. Pass one of them."
            )
    if module and no_python:
        raise LaunchError(
            "--module and --no_python contradict each other: --module runs a Python module with the "
            "interpreter, --no_python runs an executable without it. Pass one of them."
        )


def check_values(settings: dict[str, Setting]) -> None:
    """Every check on the resolved values, one group of settings per function."""
    check_process_layout(settings)
    check_rendezvous(settings)
    check_mixed_precision_setting(settings["mixed_precision"])
    check_count(settings["gradient_accumulation_steps"])
    check_gpu_request(settings)


def _fail(setting: Setting, rule: str) -> LaunchError:
    return LaunchError(f"{setting.name}={setting.value} (from {setting.source}) {rule}")


def check_count(setting: Setting, minimum: int = 1) -> None:
    """A count (processes, machines, accumulation steps) below ``minimum``; ``None`` means unset."""
    if setting.value is not None and int(setting.value) < minimum:
        raise _fail(setting, f"must be at least {minimum}.")


def check_mixed_precision_setting(setting: Setting) -> str:
    """The launcher's (and notebook_launcher's) mixed-precision check, through the one vocabulary."""
    from accelerate.utils.dataclasses import check_mixed_precision
    from accelerate.utils.errors import NotAvailableYetError

    try:
        return check_mixed_precision(
            setting.value, origin=f"{setting.name}={setting.value} (from {setting.source})"
        )
    except (ValueError, NotAvailableYetError) as exc:
        raise LaunchError(str(exc)) from None


def check_process_layout(settings: dict[str, Setting]) -> None:
    """How many processes on how many machines, and this machine's place among them."""
    procs, machines, rank = settings["num_processes"], settings["num_machines"], settings["machine_rank"]
    check_count(procs)
    check_count(machines)
    if not 0 <= int(rank.value) < int(machines.value):
        raise LaunchError(
            f"machine_rank={rank.value} (from {rank.source}) must be between 0 and num_machines - 1, but "
            f"num_machines={machines.value} (from {machines.source}). Give each machine its own rank "
            "0, 1, ..., num_machines - 1."
        )
    if int(procs.value) % int(machines.value) != 0:
        raise LaunchError(
            f"num_processes={procs.value} (from {procs.source}) is the total over all machines and must be a "
            f"multiple of num_machines={machines.value} (from {machines.source}); every machine runs "
            "num_processes / num_machines processes."
        )
    if int(machines.value) > 1 and int(rank.value) > 0 and not settings["main_process_ip"].value:
        raise LaunchError(
            f"machine_rank={rank.value} (from {rank.source}) joins a {machines.value}-machine run, so it needs "
            "the address of machine 0: pass --main_process_ip (and --main_process_port if not 29500)."
        )


def check_rendezvous(settings: dict[str, Setting]) -> None:
    """torch.distributed.run's rendezvous and restart options."""
    from accelerate.config.config_file import RDZV_BACKENDS

    backend = settings["rdzv_backend"]
    if backend.value is not None and str(backend.value) not in RDZV_BACKENDS:
        raise LaunchError(
            f"rdzv_backend={backend.value!r} (from {backend.source}) is not a torch.distributed.run rendezvous "
            f"backend; use one of {', '.join(RDZV_BACKENDS)}."
        )
    check_count(settings["max_restarts"], minimum=0)
    if float(settings["monitor_interval"].value) <= 0:
        raise _fail(settings["monitor_interval"], "must be a positive number of seconds.")
    port = settings["main_process_port"]
    if port.value is not None and not 0 <= int(port.value) <= 65535:
        raise _fail(port, "must be a TCP port number (0-65535; 0 picks a free one on one machine).")


def check_gpu_request(settings: dict[str, Setting]) -> None:
    """--multi_gpu / --gpu_ids against an explicit CPU request, and gpu_ids against the process count."""
    cpu = settings["cpu"]
    if settings["multi_gpu"].from_flag and cpu.value:
        raise LaunchError(
            f"--multi_gpu contradicts cpu=True (from {cpu.source}). Drop --multi_gpu to run on CPU, or set "
            "use_cpu to false."
        )
    if settings["gpu_ids"].from_flag and cpu.value:
        raise LaunchError(f"--gpu_ids contradicts cpu=True (from {cpu.source}): CPU processes use no GPU.")
    gpu_ids = settings["gpu_ids"].value
    if gpu_ids not in (None, "all") and not cpu.value:
        procs, machines = settings["num_processes"], settings["num_machines"]
        count = len([g for g in str(gpu_ids).split(",") if g.strip()])
        per_machine = int(procs.value) // int(machines.value)
        if per_machine > count:
            raise LaunchError(
                f"num_processes={procs.value} (from {procs.source}) puts {per_machine} processes on this "
                f"machine, but gpu_ids={gpu_ids} (from {settings['gpu_ids'].source}) names only {count} "
                "GPU(s). Use as many processes per machine as GPU ids."
            )


def gpu_request(settings: dict[str, Setting]) -> list[str]:
    """The settings that ask for GPUs (``--multi_gpu``, ``distributed_type: MULTI_GPU``, gpu ids), as
    the user spelled them; empty when none does or CPU was asked for."""
    if settings["cpu"].value:
        return []
    asked = []
    multi = settings["multi_gpu"]
    if multi.value:
        asked.append(
            "--multi_gpu" if multi.from_flag else f"distributed_type: MULTI_GPU (from {multi.source})"
        )
    ids = settings["gpu_ids"]
    if ids.value not in (None, "all"):
        asked.append(
            f"--gpu_ids {ids.value}" if ids.from_flag else f"gpu_ids: {ids.value} (from {ids.source})"
        )
    return asked


# Flags that only matter when torchrun starts several processes, or several machines are involved.
_MULTI_PROCESS_ONLY = (
    "main_process_ip", "main_process_port", "rdzv_backend", "rdzv_conf", "max_restarts", "monitor_interval",
)  # fmt: skip
_MULTI_MACHINE_ONLY = ("same_network",)


def check_ignored(settings: dict[str, Setting], mode: str) -> None:
    procs = settings["num_processes"]
    if mode == "single":
        for name in (*_MULTI_PROCESS_ONLY, *_MULTI_MACHINE_ONLY, "multi_gpu"):
            # Upstream's DEFAULT_LAUNCH_COMMAND (what client test suites launch with) passes
            # --monitor_interval with one process; a poll interval changes no result, so accept it.
            if name == "monitor_interval":
                continue
            if settings[name].from_flag:
                raise LaunchError(
                    f"--{name} has no effect here: num_processes={procs.value} (from {procs.source}) runs a "
                    f"single process. Drop --{name}, or ask for several processes with --num_processes N."
                )
        return
    machines = settings["num_machines"]
    if int(machines.value) == 1:
        for name in _MULTI_MACHINE_ONLY:
            if settings[name].from_flag:
                raise LaunchError(
                    f"--{name} has no effect here: num_machines={machines.value} (from {machines.source}). "
                    f"Drop --{name}, or pass --num_machines N for a multi-machine run."
                )
