"""Free functions over mixed precision for code without an Accelerator at hand (upstream's
``get_grad_scaler`` and ``get_mixed_precision_context_manager``); both read the process's state.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from accelerate.utils.dataclasses import AutocastKwargs, GradScalerKwargs


def _device() -> torch.device:
    from accelerate.state import PartialState

    return PartialState().device


def get_grad_scaler(distributed_type: Any = None, **kwargs: Any) -> torch.amp.GradScaler:
    """A ``torch.amp.GradScaler`` for this process's device; ``kwargs`` go to it (``init_scale``, ...).

    Example:
        >>> scaler = get_grad_scaler(init_scale=1024.0)
    """
    # ``distributed_type`` is upstream's argument: torch's GradScaler serves every backend here, FSDP2's
    # DTensor gradients included (its found_inf is reduced over the mesh), so it changes nothing.
    GradScalerKwargs(**kwargs)  # the same argument names and checks as the Accelerator's handler
    return torch.amp.GradScaler(_device().type, **kwargs)


def get_mixed_precision_context_manager(
    native_amp: bool = False, autocast_kwargs: AutocastKwargs | None = None
) -> contextlib.AbstractContextManager[Any]:
    """The autocast context of this process's mixed-precision mode (``AcceleratorState().mixed_precision``),
    or a null context when ``native_amp`` is False or the mode is ``"no"``."""
    if not native_amp:
        return contextlib.nullcontext()
    from accelerate.precision.amp import Precision
    from accelerate.state import AcceleratorState

    state = AcceleratorState()
    return Precision(state.mixed_precision, state.device, autocast_kwargs=autocast_kwargs).autocast()
