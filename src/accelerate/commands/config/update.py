"""``accelerate.commands.config.update``: ``accelerate config update`` (rewrite a file in the current schema)."""

from __future__ import annotations

import argparse
from typing import Any

from accelerate.commands.config import run_update

__all__ = ["update_command_parser", "update_config", "update_config_command"]

description = (
    "Update an existing config file with the latest defaults while maintaining the old configuration."
)


def update_config(args: argparse.Namespace) -> int:
    """Rewrites ``args.config_file`` (default: the default config file) in the current schema."""
    return run_update(args)


def update_config_command(args: argparse.Namespace) -> int:
    """Runs ``accelerate config update`` with parsed ``args``."""
    return run_update(args)


def update_command_parser(parser: Any = None, parents: Any = None) -> argparse.ArgumentParser:
    """The ``config update`` parser (``--config_file``), standalone or added to ``parser``."""
    from accelerate.commands.config import _subcommand_parser

    return _subcommand_parser(parser, "update")
