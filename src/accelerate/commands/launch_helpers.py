"""Upstream's launch helpers (public path ``accelerate.utils.launch``), answered by our launcher.

They turn ``accelerate launch``'s parsed arguments into what it would run, so they live with the
command (``utils.launch`` re-exports them lazily; utils may not import the CLI).

``prepare_simple_launcher_cmd_env`` / ``prepare_multi_gpu_env`` take the namespace that
``accelerate.commands.launch.launch_command_parser()`` parses and return what ``accelerate launch``
would run: they build the same launch plan (``accelerate.launch.plan``), so nothing is decided twice.
``PrepareForLaunch`` sets a started process's rank variables, then calls the function.
``prepare_tpu`` adds torch_xla's bf16 switch; ``setup_fp8_env`` writes the ``ACCELERATE_FP8_*``
variables; TPU pod and SageMaker set-up raise the one "not available" error.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from accelerate.utils.errors import hardware_only

_TORCHRUN_TYPES = frozenset(
    {
        "MULTI_CPU",
        "MULTI_GPU",
        "MULTI_XPU",
        "MULTI_NPU",
        "MULTI_MLU",
        "MULTI_SDAA",
        "MULTI_MUSA",
        "MULTI_HPU",
        "DEEPSPEED",
    }
)


def env_var_path_add(env_var_name: str, path_to_add: str) -> str:
    """``$env_var_name`` with ``path_to_add`` appended as one more ``:``-separated entry (not set in place).

    Example:
        >>> env["PYTHONPATH"] = env_var_path_add("PYTHONPATH", "/opt/lib")
    """
    paths = [entry for entry in os.environ.get(env_var_name, "").split(":") if entry]
    paths.append(str(path_to_add))
    return ":".join(paths)


def _plan(args: argparse.Namespace) -> Any:
    from accelerate.commands.launch import make_plan

    return make_plan(args, os.environ, quiet=True)


def prepare_simple_launcher_cmd_env(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The command and environment ``accelerate launch`` uses for one process.

    Raises ValueError when ``args`` describe several processes (see :func:`prepare_multi_gpu_env`).
    """
    plan = _plan(args)
    if plan.mode != "single":
        raise ValueError(
            f"prepare_simple_launcher_cmd_env: these arguments start {plan.value('num_processes')} processes; "
            "use prepare_multi_gpu_env(args) (torch.distributed.run) for several."
        )
    return list(plan.command), {**os.environ, **plan.child_env}


def prepare_multi_gpu_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment each process of a several-process ``accelerate launch`` gets (CPU or GPU)."""
    plan = _plan(args)
    return {**os.environ, **plan.child_env}


def prepare_extend_env_parallelism_config(
    args: argparse.Namespace, current_env: dict[str, str]
) -> dict[str, str]:
    """Adds ``args``' parallelism settings to ``current_env`` (in place, and returns it), as the launcher does.

    Without ``args.use_parallelism_config`` nothing is added. Otherwise ``ACCELERATE_USE_PARALLELISM_CONFIG``
    and the ``PARALLELISM_CONFIG_*`` sizes (upstream's defaults for those ``args`` leaves unset); the
    checks on them (their product, CPU limits) run in ``accelerate launch`` itself.
    """
    from accelerate.config.env import write_launch_env
    from accelerate.launch.parallelism import SETTINGS, child_env_values

    values = {name: getattr(args, name, None) for name in SETTINGS}
    given = {name: value for name, value in values.items() if value is not None}
    current_env.update(write_launch_env(child_env_values(given)))
    return current_env


def prepare_deepspeed_cmd_env(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The command and environment of a ``--use_deepspeed`` launch.

    DeepSpeed runs are started like any other (torch.distributed.run, or one process), with the
    DeepSpeed settings in the environment, so this is the same plan as ``accelerate launch``.
    """
    plan = _plan(args)
    return list(plan.command), {**os.environ, **plan.child_env}


def prepare_tpu(
    args: argparse.Namespace, current_env: dict[str, str], pod: bool = False
) -> tuple[argparse.Namespace, dict[str, str]]:
    """``args`` and ``current_env`` with torch_xla's bf16 switch added, as a TPU launch sets it.

    Under ``mixed_precision == "bf16"``: ``XLA_DOWNCAST_BF16=1`` with ``args.downcast_bf16``, else
    ``XLA_USE_BF16=1``. ``pod=True`` (launching every worker of a pod from one machine) is refused:
    run ``accelerate launch --tpu`` on each worker instead (``accelerate tpu-config --command``).
    """
    if pod:
        from accelerate.config.keys import TPU_POD
        from accelerate.utils.errors import NotAvailableYetError

        raise NotAvailableYetError(f"prepare_tpu(pod=True): {TPU_POD}.")
    if str(getattr(args, "mixed_precision", None) or "no").lower() == "bf16":
        name = "XLA_DOWNCAST_BF16" if getattr(args, "downcast_bf16", False) else "XLA_USE_BF16"
        current_env[name] = "1"
    return args, current_env


@hardware_only("SageMaker launching", "Amazon SageMaker, which this release does not launch on")
def prepare_sagemager_args_inputs(sagemaker_config: Any, args: argparse.Namespace) -> Any: ...


def setup_fp8_env(args: argparse.Namespace, current_env: dict[str, str]) -> dict[str, str]:
    """``current_env`` with an ``ACCELERATE_FP8_*`` variable for each ``fp8_*`` argument that is set
    (upstream's names; ``fp8_backend`` upper-cased), as the launcher writes them for an fp8 run."""
    for name, value in vars(args).items():
        if name.startswith("fp8_") and value is not None:
            text = str(value).upper() if name == "fp8_backend" else str(value)
            current_env[f"ACCELERATE_{name.upper()}"] = text
    return current_env


class PrepareForLaunch:
    """Wraps ``launcher`` for a process starter that calls ``f(index, *args)`` (such as
    ``torch.multiprocessing.start_processes``): sets the process's rank variables from ``index``, then
    runs ``launcher(*args)``.

    With ``debug=True`` the process joins a gloo group through a file store instead
    (``WORLD_SIZE`` and ``ACCELERATE_DEBUG_RDV_FILE`` name its size and file).

    Example:
        >>> start_processes(PrepareForLaunch(train, distributed_type="MULTI_CPU"), args=(config,), nprocs=2)
    """

    def __init__(
        self, launcher: Callable[..., Any], distributed_type: str = "NO", debug: bool = False
    ) -> None:
        self.launcher = launcher
        self.distributed_type = str(getattr(distributed_type, "value", distributed_type))
        self.debug = debug

    def __call__(self, index: int, *args: Any) -> Any:
        if self.debug:
            import torch.distributed as dist

            world_size = int(os.environ["WORLD_SIZE"])
            store = dist.FileStore(os.environ["ACCELERATE_DEBUG_RDV_FILE"], world_size)
            dist.init_process_group("gloo", rank=index, store=store, world_size=world_size)
        elif self.distributed_type in _TORCHRUN_TYPES:
            # The rank variables torch.distributed reads; the node's offset comes from NPROC and NODE_RANK.
            per_node = int(os.environ.get("NPROC", 1))
            node_rank = int(os.environ.get("NODE_RANK", 0))
            os.environ["LOCAL_RANK"] = str(index)
            os.environ["RANK"] = str(per_node * node_rank + index)
        return self.launcher(*args)
