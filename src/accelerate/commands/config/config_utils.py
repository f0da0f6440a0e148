"""``accelerate.commands.config.config_utils``: upstream's small prompt helpers and value converters."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from accelerate.commands.config import DYNAMO_BACKEND_CHOICES
from accelerate.utils.dataclasses import AVAILABLE_MIXED_PRECISION_MODES

__all__ = ["DYNAMO_BACKENDS", "SubcommandHelpFormatter"]

DYNAMO_BACKENDS = [backend.upper() for backend in DYNAMO_BACKEND_CHOICES]


def _ask_field(
    input_text: str,
    convert_value: Callable[[str], Any] | None = None,
    default: Any = None,
    error_message: str | None = None,
) -> Any:
    """Asks until an answer converts; an empty answer gives ``default`` (when there is one)."""
    while True:
        answer = input(input_text)
        if default is not None and len(answer) == 0:
            return default
        try:
            return convert_value(answer) if convert_value is not None else answer
        except Exception:
            if error_message is not None:
                print(error_message)


def _ask_options(
    input_text: str,
    options: Sequence[str] = (),
    convert_value: Callable[[int], Any] | None = None,
    default: int = 0,
) -> Any:
    """Shows numbered ``options`` and asks for one; returns its index (converted by ``convert_value``)."""
    lines = [input_text, *(f"  [{i}] {option}" for i, option in enumerate(options))]
    while True:
        answer = input("\n".join(lines) + f"\nChoice [{default}]: ").strip()
        try:
            index = default if answer == "" else int(answer)
        except ValueError:
            continue
        if 0 <= index < len(options):
            return convert_value(index) if convert_value is not None else index


def _convert_yes_no_to_bool(value: str) -> bool:
    return {"yes": True, "no": False}[value.lower()]


def _convert_mixed_precision(value: str | int) -> str:
    return AVAILABLE_MIXED_PRECISION_MODES[int(value)]


def _convert_compute_environment(value: str | int) -> Any:
    from accelerate.utils.dataclasses import ComputeEnvironment

    return ComputeEnvironment(["LOCAL_MACHINE", "AMAZON_SAGEMAKER"][int(value)])


def _convert_dynamo_backend(value: str | int) -> str:
    return DYNAMO_BACKENDS[int(value)]


class SubcommandHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """A help formatter that leaves the ``{a,b,c}`` list of subcommands out of their usage line."""

    def _format_usage(self, usage: Any, actions: Any, groups: Any, prefix: Any) -> str:
        text = super()._format_usage(usage, actions, groups, prefix)
        return text.replace("<command> [<args>] ", "")
