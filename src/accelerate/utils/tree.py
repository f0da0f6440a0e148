"""Operations on nested batches: lists, tuples, namedtuples, dicts and dataclasses of tensors.

Every function walks the structure once and rebuilds it with the same container types, so a
namedtuple stays a namedtuple and a dict keeps its class. Leaves that are not tensors are left
alone unless the caller asks for an error (upstream's message; check_tensor_leaves names the leaf's path).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import torch


def is_torch_tensor(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor)


def is_namedtuple(data: Any) -> bool:
    return isinstance(data, tuple) and hasattr(data, "_fields")


def honor_type(obj: Any, generator: Any) -> Any:
    """Builds a container of ``obj``'s type from ``generator`` (namedtuples take positional args)."""
    if is_namedtuple(obj):
        return type(obj)(*list(generator))
    return type(obj)(generator)


def _join(path: str, key: Any) -> str:
    return f"{path}[{key!r}]"


def _walk(
    func: Callable[..., Any],
    data: Any,
    path: str,
    test_type: Callable[[Any], bool],
    error_on_other_type: bool,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    if test_type(data):
        return func(data, *args, **kwargs)
    if isinstance(data, list | tuple):
        return honor_type(
            data,
            (
                _walk(func, item, _join(path, i), test_type, error_on_other_type, args, kwargs)
                for i, item in enumerate(data)
            ),
        )
    if isinstance(data, Mapping):
        items = {
            k: _walk(func, v, _join(path, k), test_type, error_on_other_type, args, kwargs)
            for k, v in data.items()
        }
        try:
            return cast(Any, type(data))(items)
        except TypeError:  # a Mapping whose constructor does not take a dict
            return items
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        changes = {
            f.name: _walk(
                func, getattr(data, f.name), f"{path}.{f.name}", test_type, error_on_other_type, args, kwargs
            )
            for f in dataclasses.fields(data)
            if f.init
        }
        return dataclasses.replace(data, **changes)
    if error_on_other_type:
        # Upstream's exact message (its users' tests compare it); the collectives name the path themselves.
        raise TypeError(
            f"Unsupported types ({type(data)}) passed to `{getattr(func, '__name__', func)}`. Only nested "
            "list/tuple/dicts of objects that are valid for `is_torch_tensor` should be passed."
        )
    return data


def recursively_apply(
    func: Callable[..., Any],
    data: Any,
    *args: Any,
    test_type: Callable[[Any], bool] = is_torch_tensor,
    error_on_other_type: bool = False,
    **kwargs: Any,
) -> Any:
    """Applies ``func`` to every leaf of ``data`` that passes ``test_type``, keeping the structure.

    Example:
        >>> recursively_apply(lambda t: t * 2, {"a": torch.ones(2), "b": [torch.zeros(1)]})
    """
    return _walk(func, data, "", test_type, error_on_other_type, args, kwargs)


def check_tensor_leaves(data: Any, operation: str) -> None:
    """Raises a TypeError naming ``operation``, the leaf's type and its path if a leaf is not a tensor."""

    def _visit(value: Any, path: str) -> None:
        if isinstance(value, torch.Tensor):
            return
        if isinstance(value, list | tuple):
            for i, item in enumerate(value):
                _visit(item, _join(path, i))
        elif isinstance(value, Mapping):
            for key, item in value.items():
                _visit(item, _join(path, key))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                _visit(getattr(value, f.name), f"{path}.{f.name}")
        else:
            raise TypeError(
                f"{operation} only works on tensors or nested lists/tuples/dicts of tensors, but found a "
                f"{type(value).__name__} at {path or 'the top level'}. Convert it to a tensor first, or use "
                "gather_object / broadcast_object_list for arbitrary python objects."
            )

    _visit(data, "")


def send_to_device(
    tensor: Any,
    device: torch.device | str | int,
    non_blocking: bool = False,
    skip_keys: Sequence[str] | str | None = None,
) -> Any:
    """Moves every tensor (or object with a ``.to`` method) in a nested structure to ``device``.

    Strings and other leaves pass through; keys in ``skip_keys`` are left where they are.
    """
    if isinstance(skip_keys, str):
        skip_keys = [skip_keys]
    return _send(tensor, device, non_blocking, frozenset(skip_keys or ()))


def _send(data: Any, device: Any, non_blocking: bool, skip: frozenset[str]) -> Any:
    # The hot path of every training step: tensors first, no recursion helpers in between.
    if isinstance(data, torch.Tensor):
        return data.to(device, non_blocking=non_blocking)
    if isinstance(data, list | tuple):
        return honor_type(data, (_send(item, device, non_blocking, skip) for item in data))
    if isinstance(data, Mapping):
        moved = {k: (v if k in skip else _send(v, device, non_blocking, skip)) for k, v in data.items()}
        try:
            return cast(Any, type(data))(moved)
        except TypeError:
            return moved
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return dataclasses.replace(
            data,
            **{
                f.name: _send(getattr(data, f.name), device, non_blocking, skip)
                for f in dataclasses.fields(data)
                if f.init
            },
        )
    to = getattr(data, "to", None)
    if callable(to) and not isinstance(data, str | bytes | type):
        try:
            return to(device, non_blocking=non_blocking)
        except TypeError:
            return to(device)
    return data


def get_data_structure(data: Any) -> Any:
    """The same structure with each tensor replaced by its (shape, dtype)."""
    return recursively_apply(lambda t: (tuple(t.shape), t.dtype), data)


def find_batch_size(data: Any) -> int | None:
    """The first dimension of the first tensor found in ``data`` (None if there is none)."""
    if isinstance(data, torch.Tensor):
        return int(data.shape[0]) if data.dim() > 0 else None
    if isinstance(data, list | tuple):
        for item in data:
            size = find_batch_size(item)
            if size is not None:
                return size
        return None
    if isinstance(data, Mapping):
        for value in data.values():
            size = find_batch_size(value)
            if size is not None:
                return size
        return None
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return find_batch_size([getattr(data, f.name) for f in dataclasses.fields(data)])
    return None


def ignorant_find_batch_size(data: Any) -> int | None:
    """:func:`find_batch_size` for data that may hold no tensor at all: never raises, None then."""
    try:
        return find_batch_size(data)
    except (TypeError, ValueError):  # an exotic container whose iteration fails
        return None


def concatenate(data: Sequence[Any], dim: int = 0) -> Any:
    """Concatenates a list of same-structured batches along ``dim``, leaf by leaf.

    As upstream, a single batch is returned as it is even where a leaf is not a tensor (there is
    nothing to join); several batches with a non-tensor leaf raise a TypeError.
    """
    if len(data) == 0:
        raise ValueError("concatenate needs at least one element")
    first = data[0]
    if len(data) == 1 and not isinstance(first, torch.Tensor | list | tuple | Mapping):
        return first
    if isinstance(first, torch.Tensor):
        return torch.cat(list(data), dim=dim)
    if isinstance(first, list | tuple):
        return honor_type(first, (concatenate([d[i] for d in data], dim=dim) for i in range(len(first))))
    if isinstance(first, Mapping):
        return cast(Any, type(first))({k: concatenate([d[k] for d in data], dim=dim) for k in first})
    raise TypeError(
        f"concatenate can only join tensors or nested lists/tuples/dicts of them, not {type(first).__name__}"
    )


def slice_tensors(
    data: Any, tensor_slice: slice | int, process_index: int | None = None, num_processes: int | None = None
) -> Any:
    """Slices every tensor of a nested structure.

    ``process_index`` / ``num_processes`` are accepted for upstream's signature (its XLA path uses
    them); the slice alone decides the result.
    """
    return recursively_apply(lambda t: t[tensor_slice], data)


def pad_input_tensors(tensor: Any, batch_size: int, num_processes: int, dim: int = 0) -> Any:
    """Pads each tensor with zeros along ``dim`` up to the next multiple of ``num_processes``.

    For splitting a batch of ``batch_size`` samples evenly between processes (each then gets
    ``padded // num_processes``); drop the padding after gathering the results. A batch that already
    divides evenly is returned as it is.

    Example:
        >>> pad_input_tensors(torch.ones(5, 2), batch_size=5, num_processes=2).shape
        torch.Size([6, 2])
    """
    if num_processes < 1:
        raise ValueError(f"pad_input_tensors(num_processes={num_processes}) needs at least one process")
    if batch_size % num_processes == 0:
        return tensor
    target = batch_size + num_processes - batch_size % num_processes

    def _pad(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 0 or t.shape[dim] != batch_size:
            return t  # not batched along dim: nothing to split, nothing to pad
        shape = list(t.shape)
        shape[dim] = target
        out = t.new_zeros(shape)
        out.narrow(dim, 0, batch_size).copy_(t)
        return out

    return recursively_apply(_pad, tensor)


def merge_dicts(source: Mapping[Any, Any], destination: dict[Any, Any]) -> dict[Any, Any]:
    """Merges ``source`` into ``destination`` in place, nested dicts key by key; returns ``destination``.

    Example:
        >>> merge_dicts({"a": {"x": 1}}, {"a": {"y": 2}, "b": 3})
        {'a': {'y': 2, 'x': 1}, 'b': 3}
    """
    for key, value in source.items():
        if isinstance(value, Mapping):
            node = destination.get(key)
            if not isinstance(node, dict):
                node = destination[key] = {}
            merge_dicts(value, node)
        else:
            destination[key] = value
    return destination


def listify(data: Any) -> Any:
    """Nested tensors to nested python lists (numbers), e.g. for logging."""
    return recursively_apply(lambda t: t.detach().cpu().tolist(), data)
