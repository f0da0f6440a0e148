"""The ``accelerate`` console script: an argparse root whose subcommands live in their own modules.

Only the module of the subcommand being run is imported, and none of them imports torch to build its
parser, so ``accelerate --help`` and ``accelerate launch --help`` answer at once.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

# name -> (module, one-line help). The module defines add_parser(subparsers) and sets func=run.
COMMANDS: dict[str, tuple[str, str]] = {
    "config": (
        "accelerate.commands.config",
        "Write a launch config file (interactive, or `config default`).",
    ),
    "env": ("accelerate.commands.env", "Print versions, devices and the config file, for bug reports."),
    "estimate-memory": (
        "accelerate.commands.estimate",
        "Estimate the memory a model needs to load and to train, from its config alone.",
    ),
    "launch": ("accelerate.commands.launch", "Run a training script on one or several processes/machines."),
    "merge-weights": (
        "accelerate.commands.merge",
        "Merge a sharded checkpoint (shards + index, or a torch.distributed.checkpoint folder) into one file.",
    ),
    "test": ("accelerate.commands.test", "Run the bundled self-check through the launcher with your config."),
    "to-fsdp2": (
        "accelerate.commands.to_fsdp2",
        "Convert a config file's fsdp_config from FSDP1 to FSDP2 keys.",
    ),
    "tpu-config": (
        "accelerate.commands.tpu",
        "Run set-up commands on every worker of a TPU pod (through gcloud).",
    ),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The root parser. With ``only``, that subcommand's module is imported and fully registered;
    the others get a placeholder (enough for the root's --help listing)."""
    parser = argparse.ArgumentParser(
        prog="accelerate",
        usage="accelerate <command> [<args>]",
        description="Launch and check distributed PyTorch training.",
        allow_abbrev=False,
    )
    subparsers = parser.add_subparsers(
        title="commands", dest="command", metavar="<command>", prog="accelerate"
    )
    for name, (module_name, help_text) in COMMANDS.items():
        if name == only:
            importlib.import_module(module_name).add_parser(subparsers)
        else:
            subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


# Subcommands whose console process ends through leave(): it has imported torch and, once its
# work is done, holds nothing a normal exit would need to tidy.
_LEAVE_AT_ONCE = frozenset({"launch"})


def main(argv: Sequence[str] | None = None) -> int:
    """The ``accelerate`` console script; ``argv`` given: the same, called in this process (returns)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    return _run(args_list, console=argv is None)


def _run(args_list: list[str], *, console: bool) -> int:
    command = args_list[0] if args_list and args_list[0] in COMMANDS else None
    parser = build_parser(command)
    if command is None:
        if not args_list:
            parser.print_help()
            return 1
        parser.parse_args(args_list)  # prints --help, or the "invalid choice" error and exits 2
        parser.print_help()
        return 1
    args = parser.parse_args(args_list)
    func = getattr(args, "func", None)
    if func is None:
        parser.parse_args([command, "--help"])
        return 1
    code: int = func(args)
    if console and command in _LEAVE_AT_ONCE:
        leave(code)
    return code


def leave(code: int) -> NoReturn:
    """Ends the process with ``code`` after its exit handlers, without the interpreter's teardown.

    A launcher that has run a job holds torch (its elastic agent) and nothing else: the workers have
    ended and its temporary folders are removed. What a normal exit adds after the ``atexit``
    handlers (which still run: logging's flush, multiprocessing's, the finalizers) is unloading
    every module and collecting torch's objects, about 0.4 CPU-seconds, paid after the job has ended
    by whatever waits for ``accelerate launch`` (a shell, a scheduler's step, a test). With another
    non-daemon thread still running the normal exit is kept, since it waits for that thread.
    """
    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(code)
    # CPython's own call at exit, private but unchanged since Python 3.0 (3.10-3.13 checked): the one
    # way to run the registered handlers in their order without the teardown that follows them.
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can reach it anyway
            pass
    os._exit(code)


def cli() -> None:
    sys.exit(main())


def _subcommand_script(command: str) -> int:
    """A console script that is one subcommand (``accelerate-launch ...`` = ``accelerate launch ...``)."""
    return _run([command, *sys.argv[1:]], console=True)


def launch_script() -> int:
    """``accelerate-launch``."""
    return _subcommand_script("launch")


def config_script() -> int:
    """``accelerate-config``."""
    return _subcommand_script("config")


def estimate_memory_script() -> int:
    """``accelerate-estimate-memory``."""
    return _subcommand_script("estimate-memory")


def merge_weights_script() -> int:
    """``accelerate-merge-weights``."""
    return _subcommand_script("merge-weights")


if __name__ == "__main__":
    cli()
