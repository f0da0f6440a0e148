"""LOMO optimizers (``pip install lomo-optim``): the update happens inside the backward pass.

``lomo_optim.Lomo`` and ``AdaLomo`` register a hook on every parameter that applies the update as soon
as that parameter's gradient exists, then drops the gradient, so a full set of gradients is never held
in memory. Their ``fused_backward(loss, lr)`` replaces ``loss.backward()`` *and* ``optimizer.step()``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import torch


def is_lomo_optimizer(optimizer: Any) -> bool:
    """Whether ``optimizer`` is a ``lomo_optim.Lomo`` or ``AdaLomo``.

    Never imports lomo_optim (it imports transformers): an optimizer of that package can only exist once
    the package is loaded.
    """
    module = sys.modules.get("lomo_optim")
    if module is None:
        return False
    classes = tuple(getattr(module, name) for name in ("Lomo", "AdaLomo") if hasattr(module, name))
    return bool(classes) and isinstance(optimizer, classes)


def lomo_backward(
    optimizers: Iterable[Any], loss: torch.Tensor, learning_rate: float, accumulation_steps: int = 1
) -> None:
    """Runs ``fused_backward(loss, learning_rate)`` of every LOMO optimizer among ``optimizers``.

    ``optimizers`` are the raw optimizers (not the Accelerator's wrappers). Raises ValueError when none is
    a LOMO optimizer, or under gradient accumulation, which LOMO cannot do: it updates the parameters
    during each backward pass instead of after the last micro-step.
    """
    lomo = [optimizer for optimizer in optimizers if is_lomo_optimizer(optimizer)]
    if not lomo:
        raise ValueError(
            "Accelerator.lomo_backward(loss, learning_rate) needs a prepared lomo_optim.Lomo or AdaLomo "
            "optimizer, and none of the prepared optimizers is one. Build one with Lomo(model, lr=...) and pass "
            "it to accelerator.prepare, or call accelerator.backward(loss) for other optimizers."
        )
    if accumulation_steps > 1:
        raise ValueError(
            f"Accelerator.lomo_backward cannot accumulate gradients (gradient_accumulation_steps="
            f"{accumulation_steps}): LOMO updates the parameters inside every backward pass. Use "
            "gradient_accumulation_steps=1 with LOMO, or another optimizer with accumulation."
        )
    for optimizer in lomo:
        optimizer.fused_backward(loss, learning_rate)
