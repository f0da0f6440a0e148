"""`accelerate launch --tpu` (or ``distributed_type: XLA``): torch_xla's multiprocessing spawn under PJRT.

As upstream, a TPU launch does not run the script top to bottom: it imports it and has torch_xla
start one process per XLA device, each calling the script's ``main_training_function`` (``main``
by default) with no arguments; ``sys.argv`` is the script's command line, so ``argparse`` in that
function works. The launcher starts one child, ``python -m accelerate.launch.xla_spawn``, which
does the spawning (:mod:`accelerate.launch.xla_spawn`).

Nothing here imports torch_xla (the launcher must not claim the TPU its children need); whether it
is installed is a path lookup. This is launcher machinery (checks on the plan's settings, the child's
command), so it stays in ``launch/``; torch_xla's bf16 switches come from the XLA backend
(:mod:`accelerate.backends.xla.precision`).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from accelerate.backends.xla.precision import bf16_env
from accelerate.launch.checks import LaunchError
from accelerate.utils.xla import INSTALL_HINT

if TYPE_CHECKING:
    from accelerate.config.config_file import LaunchConfig
    from accelerate.launch.plan import Setting

SPAWN_MODULE = "accelerate.launch.xla_spawn"
# --help of the TPU flags (they are listed with the refused ones, which they are where torch_xla is missing).
FLAG_HELP = {
    "tpu": "Run on XLA devices (TPU) through torch_xla: each process calls --main_training_function.",
    "main_training_function": "The script's function a TPU launch calls in each process (default: main).",
    "downcast_bf16": "With --mixed_precision bf16 on TPU: XLA_DOWNCAST_BF16 (fp32 -> bf16, fp64 -> fp32).",
    "no_tpu_cluster": "Launch on this TPU VM only (the default here).",
}
# torch.distributed.run's rendezvous options: PJRT finds the devices (and a pod's hosts) itself.
_NOT_FOR_XLA = (
    "multi_gpu", "gpu_ids", "main_process_ip", "main_process_port", "rdzv_backend", "rdzv_conf", "max_restarts",
    "tee", "log_dir", "role", "mpirun_hostfile",
)  # fmt: skip


def torch_xla_installed() -> bool:
    """Whether torch_xla can be imported here (found on the path; not imported)."""
    try:
        return importlib.util.find_spec("torch_xla") is not None
    except (ImportError, ValueError):
        return False


def asks_for_xla(flags: Mapping[str, Any], config: LaunchConfig | None) -> bool:
    """``--tpu``, or a config file with ``distributed_type: XLA``."""
    return bool(flags.get("tpu")) or (config is not None and config.distributed_type == "XLA")


def check_installed(flags: Mapping[str, Any], config: LaunchConfig | None, config_path: str) -> None:
    """A TPU launch where torch_xla is missing fails here, naming what asked for it and the pip command."""
    if not asks_for_xla(flags, config) or torch_xla_installed():
        return
    from accelerate.config.keys import XLA

    what = "--tpu" if flags.get("tpu") else f"distributed_type: XLA (from the config file {config_path})"
    drop = "drop --tpu" if flags.get("tpu") else "pass a config file without it"
    raise LaunchError(f"{what}: {XLA}, which is not installed here. Install it: {INSTALL_HINT}. Or {drop}.")


def check_settings(settings: dict[str, Setting]) -> None:
    """Flags of torchrun and mpirun launches, and CPU, contradict a TPU launch."""
    tpu = settings["tpu"]
    if settings["cpu"].value:
        raise LaunchError(
            f"cpu=True (from {settings['cpu'].source}) contradicts tpu (from {tpu.source}): a TPU launch runs "
            "on XLA devices. Drop one of them."
        )
    for name in _NOT_FOR_XLA:
        setting = settings[name]
        if setting.from_flag and setting.value not in (None, False):
            raise LaunchError(
                f"--{name} has no effect on a TPU launch (tpu from {tpu.source}): torch_xla's PJRT runtime "
                f"starts one process per XLA device and finds the others itself. Drop --{name}."
            )
    machines = settings["num_machines"]
    if int(machines.value) > 1:
        raise LaunchError(
            f"num_machines={machines.value} (from {machines.source}): on a TPU pod, run `accelerate launch --tpu` "
            'on every worker (`accelerate tpu-config --command "accelerate launch ..."` does that); PJRT '
            "connects the hosts. Leave num_machines at 1."
        )


def spawn_program(
    settings: dict[str, Setting], script: str, script_args: Sequence[str], module: bool, no_python: bool
) -> list[str]:
    """The child's command: the spawner, the process count, the function, then the script's command line."""
    if no_python:
        raise LaunchError(
            "--no_python runs an executable, but a TPU launch imports a Python script and calls its "
            f"{settings['main_training_function'].value}() in each process. Drop --no_python."
        )
    return [
        sys.executable, "-u", "-m", SPAWN_MODULE,
        "--num_processes", str(settings["num_processes"].value),
        "--main_training_function", str(settings["main_training_function"].value),
        *(["-m"] if module else []), script, *script_args,
    ]  # fmt: skip


def xla_env(settings: dict[str, Setting]) -> dict[str, str]:
    """torch_xla's own switches: bf16 storage (``XLA_USE_BF16``, or ``XLA_DOWNCAST_BF16`` with downcast_bf16)."""
    return bf16_env(settings["mixed_precision"].value, bool(settings["downcast_bf16"].value))
