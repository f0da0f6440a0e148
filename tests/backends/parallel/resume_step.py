"""The second half of every parallel resume test: load a folder saved under another topology into the
prepared objects, then train one step (top-level: pool workers import it)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from accelerate import Accelerator


def load_then_step(
    accelerator: Accelerator,
    model: Any,
    optimizer: Any,
    folder: str,
    batches: Iterable[Any],
    loss: Callable[[Any], torch.Tensor],
    max_norm: float,
) -> dict[str, Any]:
    """``load_state(folder)``, then one clipped optimizer step per batch (``loss(batch)``); returns the
    state as loaded (``loaded``) and after the steps (``state``)."""
    accelerator.load_state(folder)
    # Cloned: a plain (unsharded) parameter's entry is the live tensor, which the step below changes.
    loaded = {key: value.clone() for key, value in accelerator.get_state_dict(model).items()}
    for batch in batches:
        accelerator.backward(loss(batch))
        accelerator.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        optimizer.zero_grad()
    return {"loaded": loaded, "state": accelerator.get_state_dict(model)}
