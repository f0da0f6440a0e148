"""The ``deepspeed`` package itself: imported only here, on first use, and its engine recognised.

Every module of this backend that needs DeepSpeed calls :func:`import_deepspeed`, so a missing
install fails in one way, naming the pip command. Recognising an engine never imports DeepSpeed: only
a loaded DeepSpeed can have built one.
"""

from __future__ import annotations

import sys
from typing import Any

INSTALL = 'pip install --no-build-isolation deepspeed  (or pip install "accelerate[deepspeed]")'


def import_deepspeed() -> Any:
    """The ``deepspeed`` module; a missing one raises ImportError naming the install command.

    DeepSpeed picks its CPU accelerator by itself when no CUDA device is visible; on a GPU machine a
    CPU run needs ``DS_ACCELERATOR=cpu`` (``accelerate launch --cpu --use_deepspeed`` sets it).
    """
    try:
        import deepspeed
    except ImportError as exc:
        raise ImportError(
            f"DeepSpeed is not installed, and this run asks for it. Install it with: {INSTALL}"
        ) from exc
    return deepspeed


def is_engine(model: Any) -> bool:
    """Whether ``model`` is a ``DeepSpeedEngine`` (False, without importing it, when DeepSpeed is not loaded)."""
    engine_module = sys.modules.get("deepspeed.runtime.engine")
    return engine_module is not None and isinstance(model, engine_module.DeepSpeedEngine)
