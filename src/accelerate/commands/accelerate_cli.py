"""The ``accelerate`` console script: an argparse root whose subcommands live in their own modules.

Only the module of the subcommand being run is imported, and none of them imports torch to build its
parser, so ``accelerate --help`` and ``accelerate launch --help`` answer at once.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

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


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
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
    return code


def cli() -> None:
    sys.exit(main())


def _subcommand_script(command: str) -> int:
    """A console script that is one subcommand (``accelerate-launch ...`` = ``accelerate launch ...``)."""
    return main([command, *sys.argv[1:]])


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
