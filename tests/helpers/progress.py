"""The loop's own position as an object for ``register_for_checkpointing``: what a resumable training
loop saves beside the model so that a restart knows how many steps are done.

The launched user-shaped scripts (``tests/commands/scripts/resume_after_crash.py``,
``tests/launch/scripts/elastic_train.py``) keep their own copy on purpose: they run as plain scripts
under ``accelerate launch`` and show the whole pattern a user would write.
"""

from __future__ import annotations


class Progress:
    """How many steps the loop has done (``step``); saved and loaded as ``{"step": N}``."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = state["step"]
