"""Every check that can refuse a launch: unavailable backends, contradictory or ignored flags, bad values.

Split from :mod:`accelerate.launch.plan`, which resolves the settings these checks read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from accelerate.backends.deepspeed import launch as deepspeed_launch
from accelerate.config import keys

if TYPE_CHECKING:
    from accelerate.config.config_file import LaunchConfig
    from accelerate.launch.plan import Setting

# Backends the config schema knows but this package does not run. Refusing is better than silently
# training with plain DDP on a config that asked for sharding.
_UNAVAILABLE_TYPES = {
    "MEGATRON_LM": "Megatron-LM needs NVIDIA GPUs and the megatron-core package",
    "MULTI_NPU": "Ascend NPUs need torch_npu and NPU hardware",
    "MULTI_MLU": "Cambricon MLUs need torch_mlu and MLU hardware",
    "MULTI_SDAA": "SDAA devices need torch_sdaa and SDAA hardware",
    "MULTI_MUSA": "MUSA devices need torch_musa and Moore Threads hardware",
    "MULTI_HPU": "Gaudi HPUs need habana_frameworks and Gaudi hardware",
}

# Upstream's launch flags for features that cannot run here: (prefix or exact name, feature switch,
# reason). The first matching row wins. A switch (--use_fsdp) is refused for its feature; a flag that
# only tunes that feature is refused naming both, since without the switch it would be ignored.
_REFUSED_FLAG_RULES: tuple[tuple[str, str | None, str], ...] = (
    ("deepspeed_hostfile", None, keys.DEEPSPEED_MULTINODE),
    ("deepspeed_inclusion_filter", None, keys.DEEPSPEED_MULTINODE),
    ("deepspeed_exclusion_filter", None, keys.DEEPSPEED_MULTINODE),
    ("use_megatron_lm", None, keys.MEGATRON),
    ("megatron_lm_", "use_megatron_lm", keys.MEGATRON),
    ("tpu", None, keys.XLA),
    ("tpu_use_sudo", "tpu", keys.TPU_POD),
    ("no_tpu_cluster", "tpu", keys.XLA),
    ("vm", "tpu", keys.TPU_POD),
    ("env", "tpu", keys.TPU_POD),
    ("main_training_function", "tpu", keys.XLA),
    ("downcast_bf16", "tpu", keys.XLA),
    ("aws_", None, keys.SAGEMAKER),
    ("enable_cpu_affinity", None, keys.AFFINITY),
)


def _refused_rule(name: str) -> tuple[str | None, str] | None:
    for prefix, switch, reason in _REFUSED_FLAG_RULES:
        # A row ending in "_" is a prefix (fsdp_...); any other row is one exact flag name.
        if name == prefix or (prefix.endswith("_") and name.startswith(prefix)):
            return switch, reason
    return None


def refused_flag_reason(name: str) -> str:
    """Why ``--name`` is refused (for its --help line); raises KeyError for a flag that runs here."""
    rule = _refused_rule(name)
    if rule is None:
        raise KeyError(f"--{name} is not a refused launch flag")
    return rule[1]


class LaunchError(ValueError):
    """A launch request that cannot run as asked; the message names the flags and the fix."""


def check_unavailable(flags: Mapping[str, Any], config: LaunchConfig | None, config_path: str) -> list[str]:
    """Refuses flags and config keys of features that cannot run here; returns warnings for config keys
    that are set but not used (see :mod:`accelerate.config.keys`)."""
    from accelerate.launch import xla

    xla.check_installed(flags, config, config_path)
    for name, value in flags.items():
        rule = _refused_rule(name)
        if rule is None or value is None or value is False:
            continue
        switch, reason = rule
        # A TPU launch runs (check_installed refused it above where torch_xla is missing), and so do
        # the flags that tune it; without --tpu those flags fall to the "feature is off" error below.
        tpu = xla.asks_for_xla(flags, config)
        if reason == keys.XLA and (switch is None or tpu):
            continue
        if switch is not None and not (flags.get(switch) or (switch == "tpu" and tpu)):
            raise LaunchError(
                f"--{name} configures a feature that is off (no --{switch}), so it would be ignored; and {reason}. "
                f"Drop --{name}."
            )
        fix = (
            " to run with plain data parallelism (DDP), knowing that it does not shard the model"
            if name in ("use_fsdp", "use_deepspeed", "use_megatron_lm")
            else ""
        )
        raise LaunchError(f"--{name}: {reason}. Drop --{name}{fix}.")
    if config is None:
        return []
    if config.distributed_type in _UNAVAILABLE_TYPES:
        raise LaunchError(
            f"The config file {config_path} sets distributed_type: {config.distributed_type}, but "
            f"{_UNAVAILABLE_TYPES[config.distributed_type]}. Write a config without it (`accelerate config`) "
            "or pass another one with --config_file."
        )
    if config.compute_environment == "AMAZON_SAGEMAKER":
        raise LaunchError(
            f"The config file {config_path} sets compute_environment: AMAZON_SAGEMAKER, but "
            f"{keys.SAGEMAKER} (not available in this accelerate). Use a LOCAL_MACHINE config."
        )
    review = keys.review_config(config, config_path)
    if review.errors:
        fix = "Remove these keys (or set them to false), or write a fresh file with `accelerate config`."
        raise LaunchError("\n".join([*review.errors, fix]))
    return review.warnings


def check_flag_pairs(flags: Mapping[str, Any], module: bool, no_python: bool) -> None:
    if flags.get("use_fsdp") and flags.get("use_deepspeed"):
        raise LaunchError(
            "--use_fsdp and --use_deepspeed contradict each other: FSDP and DeepSpeed each shard the model their "
            "own way. Pass one of them."
        )
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
    check_deepspeed(settings)


# Settings that only tune DeepSpeed: given without it, they would be silently ignored.
DEEPSPEED_ONLY = deepspeed_launch.DEEPSPEED_ONLY


def check_deepspeed(settings: dict[str, Setting]) -> None:
    """DeepSpeed's settings need DeepSpeed; its multi-machine launcher is torch.distributed.run here."""
    use = settings["use_deepspeed"]
    if not use.value:
        for name in DEEPSPEED_ONLY:
            if settings[name].from_flag:
                raise LaunchError(
                    f"--{name} configures DeepSpeed, which is off (no --use_deepspeed, and no distributed_type: "
                    f"DEEPSPEED in the config file), so it would be ignored. Add --use_deepspeed, or drop --{name}."
                )
        return
    from accelerate.config.env import parse_bool

    for name in ("zero3_init_flag", "zero3_save_16bit_model"):  # upstream's flags take true/false as text
        setting = settings[name]
        if isinstance(setting.value, str):
            try:
                settings[name] = dataclasses.replace(setting, value=parse_bool(name, setting.value))
            except ValueError:
                raise _fail(setting, "must be true or false.") from None
    launcher = settings["deepspeed_multinode_launcher"]
    if launcher.value not in (None, "standard"):
        raise LaunchError(
            f"deepspeed_multinode_launcher={launcher.value} (from {launcher.source}): {keys.DEEPSPEED_MULTINODE}. "
            "Use 'standard' (or leave it out)."
        )
    path = settings["deepspeed_config_file"]
    if path.value:
        import os

        if not os.path.isfile(str(path.value)):
            raise LaunchError(f"deepspeed_config_file={path.value} (from {path.source}): no such file.")


def _fail(setting: Setting, rule: str) -> LaunchError:
    return LaunchError(f"{setting.name}={setting.value} (from {setting.source}) {rule}")


def check_count(setting: Setting, minimum: int = 1) -> None:
    """A count (processes, machines, accumulation steps) below ``minimum``; ``None`` means unset."""
    if setting.value is not None and int(setting.value) < minimum:
        raise _fail(setting, f"must be at least {minimum}.")


def check_mixed_precision_setting(setting: Setting) -> str:
    """The launcher's (and notebook_launcher's) mixed-precision check, through the one vocabulary."""
    from accelerate.utils.enums import check_mixed_precision
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


_TORCHRUN_AGENT_ONLY = ("rdzv_backend", "rdzv_conf", "max_restarts", "tee", "log_dir", "role")


def check_mpirun(settings: dict[str, Setting]) -> None:
    """mpirun starts CPU processes on every host from this one; torchrun's agent options do not apply."""
    hostfile = settings["mpirun_hostfile"]
    where = (
        "--mpirun_hostfile"
        if hostfile.from_flag
        else f"mpirun_config.mpirun_hostfile (from {hostfile.source})"
    )
    if not settings["cpu"].value:
        raise LaunchError(
            f"{where} launches CPU processes through mpirun, but this run is not a CPU run. Pass --cpu (or set "
            "distributed_type: MULTI_CPU / use_cpu: true), or drop the hostfile to launch GPU processes with "
            "torch.distributed.run."
        )
    for name in _TORCHRUN_AGENT_ONLY:
        if settings[name].from_flag:
            raise LaunchError(
                f"--{name} is an option of torch.distributed.run, which {where} replaces with mpirun. Drop --{name}, "
                "or drop the hostfile."
            )
    rank = settings["machine_rank"]
    if int(rank.value) != 0:
        raise LaunchError(
            f"machine_rank={rank.value} (from {rank.source}): with {where}, mpirun starts the processes of every "
            "machine from this one, so run `accelerate launch` once, on one machine, with machine_rank 0."
        )


def check_ignored(settings: dict[str, Setting], mode: str) -> None:
    procs = settings["num_processes"]
    if mode == "mpirun":
        check_mpirun(settings)
        return
    if mode == "single":
        for name in (*_MULTI_PROCESS_ONLY, *_MULTI_MACHINE_ONLY, "multi_gpu"):
            # Upstream's DEFAULT_LAUNCH_COMMAND (what client test suites launch with) passes
            # --monitor_interval with one process; a poll interval changes no result, so accept it.
            if name == "monitor_interval":
                continue
            if settings[name].from_flag:
                typed = settings[name].flag  # --rdzv_endpoint gives main_process_ip
                raise LaunchError(
                    f"{typed} has no effect here: num_processes={procs.value} (from {procs.source}) runs a "
                    f"single process. Drop {typed}, or ask for several processes with --num_processes N."
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
