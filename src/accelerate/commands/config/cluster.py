"""``accelerate.commands.config.cluster``: the questions for this machine or a cluster of machines."""

from __future__ import annotations

from typing import Any

from accelerate.commands.config import ask_questions
from accelerate.commands.config.config_args import ClusterConfig

__all__ = ["get_cluster_input"]


def get_cluster_input(prompter: Any = None) -> ClusterConfig:
    """Asks the ``accelerate config`` questions (``prompter``: default the terminal) and returns the
    answers as a :class:`ClusterConfig`."""
    from accelerate.commands.config import _gpu_count
    from accelerate.commands.prompts import default_prompter
    from accelerate.config.config_file import config_from_dict

    data = ask_questions(prompter or default_prompter(), _gpu_count())
    values = config_from_dict(data).to_dict()  # typed and checked as a file would be
    return ClusterConfig(**values)
