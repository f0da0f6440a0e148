"""``accelerate.commands.config.default``: ``accelerate config default`` and ``write_basic_config``."""

from __future__ import annotations

import argparse
from typing import Any

from accelerate.commands.config import default_config_data, run_default, write_basic_config

__all__ = ["default_command_parser", "default_config_command", "default_config_data", "write_basic_config"]

description = "Create a default config file for Accelerate with only a few flags set."


def default_config_command(args: argparse.Namespace) -> int:
    """Runs ``accelerate config default`` with parsed ``args`` (``config_file``, ``mixed_precision``)."""
    return run_default(args)


def default_command_parser(parser: Any = None, parents: Any = None) -> argparse.ArgumentParser:
    """The ``config default`` parser (``--config_file``, ``--mixed_precision``), standalone or added to
    ``parser`` (a subparsers action)."""
    from accelerate.commands.config import _subcommand_parser

    return _subcommand_parser(parser, "default")
