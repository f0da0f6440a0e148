"""`notebook_launcher` where torch_xla is installed (Colab/Kaggle TPU, a TPU VM): torch_xla's spawn, forked.

The function is defined in a notebook cell, so it cannot be pickled into freshly spawned
interpreters: the processes are forked (torch_xla's ``start_method="fork"``), one per XLA device,
each calling ``function(*args)``. As on GPUs, no Accelerator may exist in the notebook's own process
before the launch: the forked processes would inherit its device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from accelerate.backends.xla.precision import bf16_env
from accelerate.config.env import write_launch_env
from accelerate.launch.runner import patched_environ


class _ForkedCall:
    """What each forked process runs: a clean accelerate state, the launcher's environment, the function."""

    def __init__(self, function: Callable[..., Any], env: Mapping[str, str]) -> None:
        self.function, self.env = function, dict(env)

    def __call__(self, index: int, *args: Any) -> Any:
        import os

        from accelerate.state import reset_state

        reset_state()
        os.environ.update(self.env)
        return self.function(*args)


def launch_on_xla(
    launcher: str,
    function: Callable[..., Any],
    args: Sequence[Any],
    num_processes: int | None,
    mixed_precision: str,
) -> Any:
    """Runs ``function(*args)`` on ``num_processes`` XLA devices (None: every device); see the module doc."""
    from accelerate.launch.xla_spawn import spawn_count
    from accelerate.state import state_is_initialized

    if state_is_initialized():
        raise RuntimeError(
            f"{launcher}: to train on TPU (XLA) from a notebook, the Accelerator must be created only inside your "
            "training function. Restart the notebook and make sure no cell creates an Accelerator (or "
            "PartialState) before calling the launcher."
        )
    env = write_launch_env({"mixed_precision": mixed_precision})
    env.update(bf16_env(mixed_precision, downcast_bf16=False))  # torch_xla's bf16 storage switch
    import torch_xla.distributed.xla_multiprocessing as xmp

    cores = (
        f"{num_processes} TPU core{'s' if num_processes != 1 else ''}" if num_processes else "every TPU core"
    )
    print(f"Launching a training on {cores}.")
    call = _ForkedCall(function, env)
    if num_processes == 1:
        with patched_environ(env):
            return function(*args)
    xmp.spawn(call, args=tuple(args), nprocs=spawn_count(num_processes), start_method="fork")
    return None
