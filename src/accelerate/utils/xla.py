"""torch_xla helpers every layer may use: the install hint, cutting the XLA graph, CPU copies for files.

They sit at the bottom of the layering because code below the XLA backend needs them: upstream's
strategy-less ``utils.save`` / ``save_accelerator_state`` (``checkpointing/single_file.py``) must copy
XLA tensors to CPU first as torch_xla's ``xm.save`` does (:func:`xla_to_cpu`); runs with a strategy
copy through its ``XlaCheckpointIO`` (:mod:`accelerate.backends.xla.checkpoint_io`).
Nothing here imports torch or torch_xla at import time (the launcher reads :data:`INSTALL_HINT`);
torch_xla is imported inside the functions, and only where it is already in use.

Where XLA lives otherwise: detection, placement and the communicator in :mod:`accelerate.state.xla`,
the backend (strategy, checkpoint I/O, loader, bf16 switches) in :mod:`accelerate.backends.xla`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

INSTALL_HINT = (
    "pip install torch_xla (a release matching your torch; on a machine without a TPU, run with "
    "PJRT_DEVICE=CPU to use torch_xla's CPU device)"
)


def require_torch_xla(what: str) -> None:
    """Raises an ImportError naming ``what`` and the pip command when torch_xla cannot be imported."""
    from accelerate.utils.imports import is_package_available

    if not is_package_available("torch_xla"):
        raise ImportError(f"{what} needs torch_xla, which is not installed. Install it: {INSTALL_HINT}.")


def sync() -> None:
    """Cuts the lazily recorded XLA graph here and runs it (``torch_xla.sync``, formerly ``mark_step``)."""
    import torch_xla

    step = getattr(torch_xla, "sync", None)
    if step is not None:
        step()
    else:  # torch_xla < 2.5
        import torch_xla.core.xla_model as xm

        xm.mark_step()


def _is_xla(value: Any) -> bool:
    import torch  # here, not at import: the launcher reads INSTALL_HINT without torch

    return isinstance(value, torch.Tensor) and value.device.type == "xla"


def _to_cpu(value: Any, copies: dict[int, torch.Tensor]) -> Any:
    if _is_xla(value):
        # One CPU copy per XLA tensor: a tensor reached twice (tied weights) stays one tensor.
        if id(value) not in copies:
            copies[id(value)] = value.detach().cpu()
        return copies[id(value)]
    if isinstance(value, dict):
        out = value.copy()  # keeps the mapping's type (an OrderedDict state dict stays one)
        for key, item in value.items():
            out[key] = _to_cpu(item, copies)
        return out
    if isinstance(value, list | tuple) and not hasattr(value, "_fields"):
        return type(value)(_to_cpu(v, copies) for v in value)
    return value


def _has_xla(value: Any) -> bool:
    if _is_xla(value):
        return True
    if isinstance(value, Mapping):
        return any(_has_xla(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_xla(v) for v in value)
    return False


def xla_to_cpu(obj: Any) -> Any:
    """``obj`` with every XLA tensor in it (dicts, lists, tuples) copied to CPU; other values as they are.

    What torch_xla's own ``xm.save`` does before writing: a file that holds XLA tensors could only be
    loaded where torch_xla is installed, and pending device work is run first. Without torch_xla
    loaded in this process there can be no XLA tensor, so ``obj`` comes back untouched at once.
    """
    if "torch_xla" not in sys.modules or not _has_xla(obj):
        return obj
    sync()
    return _to_cpu(obj, {})


__all__ = ["INSTALL_HINT", "require_torch_xla", "sync", "xla_to_cpu"]
