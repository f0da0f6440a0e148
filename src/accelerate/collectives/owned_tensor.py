"""A tensor that only one process holds, sent to all: the others need not know its shape or dtype.

``broadcast`` needs a buffer of the right shape and dtype on every process. When only the owner
knows them (it loaded or computed the tensor, the others pass ``None``), the description travels
first as a small object, then the data in one broadcast.
"""

from __future__ import annotations

from typing import Any

import torch

from accelerate.collectives.communicator import current_communicator
from accelerate.collectives.operations import broadcast, gather_object
from accelerate.utils.tensor_info import TENSOR_INT_TO_DTYPE, TENSOR_TYPE_TO_INT


def _describe(tensor: torch.Tensor | None) -> tuple[list[int], int] | str | None:
    if tensor is None:
        return None
    if not isinstance(tensor, torch.Tensor):
        return f"a {type(tensor).__name__}, not a tensor"
    code = TENSOR_TYPE_TO_INT.get(tensor.dtype)
    if code is None:
        return (
            f"a tensor of dtype {tensor.dtype}, which cannot be described (supported: "
            + ", ".join(str(d).replace("torch.", "") for d in TENSOR_TYPE_TO_INT)
            + ")"
        )
    return list(tensor.shape), code


def _owner(described: list[Any], call: str) -> tuple[int, list[int], int]:
    """Which process holds the tensor; the same answer (or the same error) on every process."""
    problems = [f"process {rank} passed {d}" for rank, d in enumerate(described) if isinstance(d, str)]
    if problems:
        raise TypeError(f"{call}: {'; '.join(problems)}")
    owners = [rank for rank, d in enumerate(described) if d is not None]
    if len(owners) != 1:
        who = "no process" if not owners else f"processes {owners}"
        raise ValueError(
            f"{call} needs the tensor on exactly one process (None on the others), but {who} passed one. "
            "To send a tensor every process already has a buffer for, use `broadcast`."
        )
    shape, code = described[owners[0]]
    return owners[0], shape, code


def gather_tensor_shape(tensor: torch.Tensor | None) -> tuple[torch.Size, int]:
    """The shape and dtype code of a tensor that one process passes (the others pass None).

    Call it on every process. Returns ``(shape, dtype_code)`` everywhere; ``TENSOR_INT_TO_DTYPE``
    turns the code into a ``torch.dtype``.

    Raises:
        ValueError: no process, or more than one, passed a tensor (on every process).
    """
    comm = current_communicator()
    if comm.world_size == 1:
        if tensor is None:
            raise ValueError("gather_tensor_shape: in a single process the tensor cannot be None")
        described = [_describe(tensor)]
    else:
        described = gather_object([_describe(tensor)])
    _, shape, code = _owner(described, "gather_tensor_shape")
    return torch.Size(shape), code


def copy_tensor_to_devices(tensor: torch.Tensor | None = None) -> torch.Tensor:
    """Sends the tensor one process holds to every process; the others pass None (or nothing).

    Returns the tensor on every process (the owner's own tensor on the owner; a copy elsewhere, on the
    process group's device). Call it on every process.

    Example:
        >>> weights = torch.load("w.pt") if accelerator.is_main_process else None
        >>> weights = copy_tensor_to_devices(weights)
    """
    comm = current_communicator()
    if comm.world_size == 1:
        if tensor is None:
            raise ValueError("copy_tensor_to_devices: in a single process the tensor cannot be None")
        return tensor
    owner, shape, code = _owner(gather_object([_describe(tensor)]), "copy_tensor_to_devices")
    if tensor is not None:  # this process is the owner (_owner checked there is exactly one)
        buffer = tensor.to(comm.device).contiguous()
    else:
        buffer = torch.empty(shape, dtype=TENSOR_INT_TO_DTYPE[code], device=comm.device)
    result: torch.Tensor = broadcast(buffer, from_process=owner)
    return result
