"""Collectives on nested structures: gather, broadcast, reduce, pad — identity in one process.

Debug mode (``ACCELERATE_DEBUG_MODE=1`` or ``accelerate launch --debug``): before each collective
the ranks exchange the shapes they are about to send; when they disagree, every rank raises a
:class:`DistributedOperationException` that names the operation and lists each rank's shapes,
instead of hanging inside the collective. Without debug mode no extra communication happens.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from accelerate.collectives.checks import DistributedOperationException, check_collective
from accelerate.collectives.communicator import current_communicator
from accelerate.diagnostics.watchdog import SLOT
from accelerate.utils.tree import check_tensor_leaves, recursively_apply

__all__ = [
    "CannotPadNestedTensorWarning",
    "DistributedOperationException",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "pad_across_processes",
    "chained_operation",
    "reduce",
    "verify_operation",
]

F = TypeVar("F", bound=Callable[..., Any])


class CannotPadNestedTensorWarning(UserWarning):
    """``pad_across_processes`` met a nested (jagged) tensor: it has no single size to pad, so it is left as is."""


def _world() -> int:
    return current_communicator().world_size


class _Raw:
    """A ready-made description to compare (for object collectives, which have no shapes)."""

    def __init__(self, description: list[str]) -> None:
        self.description = description


def _signature(data: Any, dims_only: bool = False) -> list[str]:
    if isinstance(data, _Raw):
        return data.description
    out: list[str] = []

    def describe(t: torch.Tensor) -> None:
        shape = f"{t.dim()}-d" if dims_only else str(tuple(t.shape))
        out.append(f"{shape}:{str(t.dtype).replace('torch.', '')}")

    recursively_apply(describe, data)
    return out


def check_operation_inputs(operation: str, data: Any, *, dims_only: bool = False) -> None:
    """Raises on every process unless all reached ``operation`` with the same structure, shapes, dtypes.

    Checks whether or not debug mode is on (call it on every process); :func:`verify_operation`
    is the decorator that runs it only in debug mode. See :mod:`accelerate.collectives.checks`.
    """
    check_collective(current_communicator(), operation, _signature(data, dims_only))


def verify_operation(function: F) -> F:
    """Decorator: in debug mode, checks the first argument (or ``tensor=``) across processes first.

    Before ``function`` runs, every process compares the structure, shapes and dtypes of the tensors
    it passes; a mismatch raises :class:`DistributedOperationException` on every process, listing each
    one's shapes, instead of hanging inside the collective. Without debug mode (or in one process)
    the function is called directly, with no communication.

    Example:
        >>> @verify_operation
        ... def my_all_gather(tensor): ...
    """
    operation = f"{function.__module__}.{function.__qualname__}"

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        comm = current_communicator()
        if comm.debug and comm.world_size > 1:
            if "tensor" in kwargs:
                data = kwargs["tensor"]
            elif args:
                data = args[0]
            else:
                raise TypeError(
                    f"{operation}() needs the tensor(s) to check as its first argument or `tensor=`"
                )
            _check_device(operation, data, comm.device)
            check_collective(comm, operation, _signature(data))
        return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _check_device(operation: str, data: Any, device: torch.device) -> None:
    """NCCL only moves GPU tensors: a CPU tensor there would fail deep inside the backend."""
    if device.type == "cpu":
        return
    from accelerate.utils.tensor_info import find_device

    found = find_device(data)
    if found is not None and found.type != device.type:
        raise DistributedOperationException(
            f"`{operation}` got tensors on {found.type} but this process group communicates on {device.type}; "
            f"move them first (e.g. `send_to_device(data, {str(device)!r})`)."
        )


def chained_operation(function: F) -> F:
    """Decorator for an operation built on checked collectives: their mismatch error names it too.

    A :class:`DistributedOperationException` raised inside ``function`` (by a collective it calls)
    is raised again naming ``function``, with the original error as its cause.
    """
    operation = f"{function.__module__}.{function.__qualname__}"

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except DistributedOperationException as exc:
            raise DistributedOperationException(
                f"`{operation}` failed in one of the collectives it makes: {exc}"
            ) from exc

    return wrapper  # type: ignore[return-value]


def _checked(operation: str, data: Any, dims_only: bool = False) -> None:
    """Debug mode's check before ``operation`` (nothing at all without debug mode)."""
    comm = current_communicator()
    if comm.debug and comm.world_size > 1:
        check_collective(comm, operation, _signature(data, dims_only))


def check_arrival(operation: str) -> None:
    """Debug mode: raises on every waiting process unless all reach ``operation`` (a barrier, say)."""
    _checked(operation, _Raw([]))


def _gather_tensor(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.dim() == 0:
        tensor = tensor.unsqueeze(0)
    return current_communicator().all_gather(tensor.contiguous())


def gather(tensor: Any) -> Any:
    """Concatenates each tensor of a nested structure across processes along the first dimension.

    Tensors must have the same shape on every process (use :func:`pad_across_processes` first
    for uneven ones). 0-d tensors become 1-d. Non-tensor leaves raise a TypeError naming them.

    As upstream, the result has no autograd history (``requires_grad`` False) even when the inputs
    have one: a loss built on it gets no gradient through the gathered copy, only through the local
    tensors it is combined with. To backpropagate into every rank's slice (contrastive losses that
    need it), gather with torch's differentiable all-gather (``all_gather`` of its ``nn.functional``
    collectives) instead.
    """
    check_tensor_leaves(tensor, "gather")  # before any communication, so every rank raises alike
    if _world() == 1:
        return recursively_apply(lambda t: t.unsqueeze(0) if t.dim() == 0 else t, tensor)
    with SLOT.enter("gather", tensor):  # the hang watchdog's record: a few attribute writes
        _checked("gather", tensor)
        return recursively_apply(_gather_tensor, tensor)


def gather_object(object: Any) -> list[Any]:  # noqa: A002 - upstream's parameter name
    """Gathers a picklable object from every process; a list from each process is flattened."""
    world = _world()
    if world == 1:
        return list(object) if isinstance(object, list) else [object]
    with SLOT.enter("gather_object"):
        _checked("gather_object", _Raw(["object"]))
        out = current_communicator().all_gather_objects(object)
    if all(isinstance(item, list) for item in out):
        return [x for item in out for x in item]
    return out


def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """Sends each tensor of ``from_process`` to every process (in place); returns the structure."""
    check_tensor_leaves(tensor, "broadcast")
    if _world() == 1:
        return tensor

    def _bcast(t: torch.Tensor) -> torch.Tensor:
        current_communicator().broadcast_(t, src=from_process)
        return t

    with SLOT.enter("broadcast", tensor):
        _checked("broadcast", tensor)
        return recursively_apply(_bcast, tensor)


def broadcast_object_list(object_list: list[Any], from_process: int = 0) -> list[Any]:
    """Replaces ``object_list``'s items, in place, by those of ``from_process``."""
    if not isinstance(object_list, list):
        raise TypeError(f"broadcast_object_list needs a list, got {type(object_list).__name__}")
    if _world() > 1:
        # Lists of different lengths would leave some ranks waiting for items never sent.
        with SLOT.enter("broadcast_object_list"):
            _checked("broadcast_object_list", _Raw([f"list of {len(object_list)} objects"]))
            current_communicator().broadcast_objects_(object_list, src=from_process)
    return object_list


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """All-reduces each tensor across the processes; the inputs are not modified.

    ``reduction``: ``"sum"``, ``"mean"`` (the sum divided by the number of processes) or ``"max"``
    (element-wise maximum). ``"none"`` divides nothing but, as upstream, still sums across the
    processes (upstream's ``reduce`` all-reduces with a sum for every reduction but ``"max"``). The
    default is ``"mean"`` here and ``"sum"`` in ``Accelerator.reduce``, as upstream.

    Example:
        >>> reduce(torch.tensor([1.0 + rank]), "max")  # doctest: +SKIP
        tensor([2.])  # on both of two processes
    """
    if reduction not in ("sum", "mean", "none", "max"):
        raise ValueError(f"reduce(reduction={reduction!r}) must be 'sum', 'mean', 'max' or 'none'")
    check_tensor_leaves(tensor, "reduce")
    world = _world()

    def _reduce(t: torch.Tensor) -> torch.Tensor:
        out = t.clone()
        if world > 1:
            if reduction == "max":
                current_communicator().all_reduce_max_(out)
            else:
                current_communicator().all_reduce_sum_(out)
        if reduction == "mean":
            out = out / world if not out.is_floating_point() else out.div_(world)
        if scale != 1.0:
            out = out * scale
        return out

    if world == 1:
        return recursively_apply(_reduce, tensor)
    with SLOT.enter("reduce", tensor):
        _checked("reduce", tensor)
        return recursively_apply(_reduce, tensor)


def pad_across_processes(tensor: Any, dim: int = 0, pad_index: Any = 0, pad_first: bool = False) -> Any:
    """Pads each tensor along ``dim`` to the largest size any process has, so it can be gathered.

    ``pad_index`` may be a tensor that broadcasts over a padded slice (a row, as upstream's
    ``split_between_processes`` passes). In one process the input comes back as it is, after the
    same checks as upstream (non-tensor leaves raise a TypeError, nested tensors warn).
    """
    world = _world()

    def _nested(t: torch.Tensor) -> bool:
        if t.is_nested:
            warnings.warn(
                "pad_across_processes cannot pad a nested tensor (its entries have different sizes); it is "
                "returned unchanged. Pad its entries (t.unbind()) or convert it with t.to_padded_tensor(0.0).",
                CannotPadNestedTensorWarning,
                stacklevel=5,
            )
        return bool(t.is_nested)

    if world == 1:
        check_tensor_leaves(tensor, "pad_across_processes")
        recursively_apply(_nested, tensor)
        return tensor

    def _pad(t: torch.Tensor) -> torch.Tensor:
        if _nested(t):
            return t
        if dim >= t.dim() or dim < -t.dim():
            return t
        axis = dim % t.dim()
        size = torch.tensor([t.shape[axis]], device=t.device, dtype=torch.int64)
        sizes = current_communicator().all_gather(size)
        longest = int(sizes.max())
        if longest == t.shape[axis]:
            return t
        shape = list(t.shape)
        shape[axis] = longest
        if isinstance(pad_index, torch.Tensor):
            out = (t.new_zeros(shape) + pad_index.to(t.device)).to(t.dtype)
        else:
            out = t.new_full(shape, pad_index)
        index = [slice(None)] * t.dim()
        index[axis] = slice(longest - t.shape[axis], longest) if pad_first else slice(0, t.shape[axis])
        out[tuple(index)] = t
        return out

    check_tensor_leaves(tensor, "pad_across_processes")
    # Sizes may differ (that is the point), but structure, dimensions and dtypes must agree.
    with SLOT.enter("pad_across_processes", tensor):
        _checked("pad_across_processes", tensor, dims_only=True)
        return recursively_apply(_pad, tensor)
