"""torch_xla at the utils level: whether XLA is in use, its collectives, and moving its tensors to CPU.

torch_xla is imported only inside these functions, and only where it is installed; where it is not,
:func:`xla_requested` is False and nothing here imports it. The state layer asks
:func:`xla_requested` whether this process runs on an XLA device; the collectives in
:mod:`accelerate.utils.collectives` reach torch_xla only through :class:`XLACommunicator`.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from accelerate.collectives.communicator import Communicator

INSTALL_HINT = (
    "pip install torch_xla (a release matching your torch; on a machine without a TPU, run with "
    "PJRT_DEVICE=CPU to use torch_xla's CPU device)"
)


def xla_requested(cpu: bool = False) -> bool:
    """True when this process trains on an XLA device: torch_xla is installed, USE_TORCH_XLA is not
    switched off, and CPU was not forced (``cpu=True``, ``--cpu``, ``ACCELERATE_USE_CPU``).

    This is upstream's rule: where torch_xla is installed (a TPU VM, Colab), a plain ``Accelerator()``
    uses its device.
    """
    if cpu:
        return False
    from accelerate.utils.imports import is_torch_xla_available

    return is_torch_xla_available()


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


@dataclass
class XLACommunicator(Communicator):
    """The collectives through torch_xla (``xm.all_gather``, ``xm.all_reduce``, ``xm.collective_broadcast``,
    ``xm.rendezvous``) instead of torch.distributed: under PJRT the processes share no torch
    process group, each owns one XLA device."""

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        import torch_xla.core.xla_model as xm

        gathered: torch.Tensor = xm.all_gather(tensor, dim=0)
        return gathered

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        import torch_xla.core.xla_model as xm

        # A list input is reduced in place (a single tensor would come back as a new one).
        xm.all_reduce(xm.REDUCE_SUM, [tensor])

    def broadcast_(self, tensor: torch.Tensor, src: int) -> None:
        import torch_xla.core.xla_model as xm

        xm.collective_broadcast([tensor], root_ordinal=src)

    def all_gather_objects(self, obj: Any) -> list[Any]:
        import torch_xla.core.xla_model as xm

        # rendezvous hands every process each one's payload: the pickled objects travel as bytes.
        payloads = xm.rendezvous("accelerate.gather_object", pickle.dumps(obj))
        return [pickle.loads(payload) for payload in payloads]  # noqa: S301 - our own processes' data

    def broadcast_objects_(self, objects: list[Any], src: int) -> None:
        gathered = self.all_gather_objects(objects if self.rank == src else None)
        objects[:] = gathered[src]

    def barrier(self, tag: str = "accelerate.wait_for_everyone") -> None:
        """Blocks until every process reaches a barrier with the same ``tag``."""
        import torch_xla.core.xla_model as xm

        xm.rendezvous(tag)


__all__ = ["INSTALL_HINT", "XLACommunicator", "require_torch_xla", "sync", "xla_requested", "xla_to_cpu"]
