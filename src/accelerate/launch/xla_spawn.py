"""The child of a TPU launch: ``python -m accelerate.launch.xla_spawn --num_processes N
--main_training_function F [-m] SCRIPT [ARGS...]``.

It imports SCRIPT as a module (its folder first on ``sys.path``, so the processes torch_xla spawns can
import it again by name), sets ``sys.argv`` to ``[SCRIPT, *ARGS]``, and calls
``torch_xla.distributed.xla_multiprocessing.spawn`` with ``nprocs=N``: one process per XLA device,
each running ``F()``. Under PJRT ``nprocs`` is 1 (this process, one device) or every device.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys


class _CallMain:
    """What each spawned process runs: import the script's module and call its function.

    A small class of names (not the function itself) so it pickles into processes started by ``spawn``.
    """

    def __init__(self, module: str, function: str, argv: list[str]) -> None:
        self.module, self.function, self.argv = module, function, argv

    def __call__(self, index: int) -> None:
        sys.argv = list(self.argv)
        main = getattr(importlib.import_module(self.module), self.function)
        main()


def _module_of(target: str, is_module: bool) -> str:
    if is_module:
        return target
    path = os.path.abspath(target)
    if not os.path.isfile(path):
        raise SystemExit(f"accelerate launch --tpu: no such script: {target}")
    folder, name = os.path.split(path)
    sys.path.insert(0, folder)
    return os.path.splitext(name)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", allow_abbrev=False)
    parser.add_argument("--num_processes", type=int, default=1)
    parser.add_argument("--main_training_function", default="main")
    parser.add_argument("-m", dest="is_module", action="store_true")
    parser.add_argument("target")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    module = _module_of(ns.target, ns.is_module)
    script_argv = [ns.target, *ns.args]
    sys.argv = list(script_argv)
    loaded = importlib.import_module(module)
    if not callable(getattr(loaded, ns.main_training_function, None)):
        raise SystemExit(
            f"accelerate launch --tpu: {ns.target} has no function {ns.main_training_function}(); a TPU launch "
            "calls that function in every process. Define it, or name yours with --main_training_function."
        )
    import torch_xla.distributed.xla_multiprocessing as xmp

    xmp.spawn(
        _CallMain(module, ns.main_training_function, script_argv),
        args=(),
        nprocs=spawn_count(ns.num_processes),
    )
    return 0


def spawn_count(num_processes: int | None) -> int | None:
    """``nprocs`` for torch_xla's spawn, which takes 1 (this process) or None (every device).

    N > 1 processes are every device with the device count capped at N through PJRT's own
    ``<DEVICE>_NUM_DEVICES`` variable (CPU_NUM_DEVICES, TPU_NUM_DEVICES, ...), unless already set.
    """
    if num_processes == 1:
        return 1
    if num_processes is not None:
        device = os.environ.get("PJRT_DEVICE", "TPU").upper()
        os.environ.setdefault(f"{device}_NUM_DEVICES", str(num_processes))
    return None


if __name__ == "__main__":
    sys.exit(main())
