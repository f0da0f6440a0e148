"""``accelerate.commands.config.config``: the ``accelerate config`` questionnaire command."""

from __future__ import annotations

import argparse
from typing import Any

from accelerate.commands.config import get_config_parser, run_questionnaire
from accelerate.commands.config.config_args import BaseConfig

__all__ = ["config_command", "config_command_parser", "get_user_input", "main"]

description = (
    "Launches a series of prompts to create and save a `default_config.yaml` configuration file for your "
    "training system. Should always be ran first on your machine"
)


def get_user_input() -> BaseConfig:
    """Asks the questions for this machine and returns the answers as a config (not written anywhere)."""
    from accelerate.commands.config.cluster import get_cluster_input

    return get_cluster_input()


def config_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``accelerate config`` parser, standalone or added to ``subparsers``."""
    return get_config_parser(subparsers)


def config_command(args: argparse.Namespace) -> int:
    """Runs the questionnaire and writes ``args.config_file`` (default: the default config file)."""
    return run_questionnaire(args)


def main() -> int:
    from accelerate.commands.config import main as config_main

    return config_main()
