"""Questions about a model's structure: its modules bottom-up, nested attributes, tensor-parallel sharding."""

from __future__ import annotations

import functools
import sys
from typing import Any

from torch import nn


def get_module_children_bottom_up(model: nn.Module, return_fqns: bool = False) -> list[Any]:
    """Every module of ``model``, each after all modules inside it, ``model`` itself last.

    Children come in registration order (depth first). With ``return_fqns=True`` the entries are
    ``(qualified_name, module)`` pairs, the model's name being ``""``. For wrapping layer by layer
    (FSDP, activation checkpointing), which must reach the leaves before their parents.

    Example:
        >>> [name for name, _ in get_module_children_bottom_up(nn.Sequential(nn.Linear(1, 1)), True)]
        ['0', '']
    """
    ordered: list[tuple[str, nn.Module]] = []
    # An explicit stack instead of recursion: very deep models would exceed Python's recursion limit.
    stack: list[tuple[str, nn.Module, bool]] = [("", model, False)]
    while stack:
        name, module, expanded = stack.pop()
        if expanded:
            ordered.append((name, module))
            continue
        stack.append((name, module, True))
        children = [
            (f"{name}.{child_name}" if name else child_name, child)
            for child_name, child in module._modules.items()
        ]
        for child_name, child in reversed(children):
            if isinstance(child, nn.Module):
                stack.append((child_name, child, False))
    return ordered if return_fqns else [module for _, module in ordered]


def recursive_getattr(obj: Any, attr: str) -> Any:
    """``getattr`` along a dotted path: ``recursive_getattr(model, "encoder.layer.0")``.

    Raises:
        AttributeError: naming the part of the path that is missing.
    """
    return functools.reduce(getattr, attr.split("."), obj)


def _dtensor_type() -> type | None:
    # DTensor parameters only exist once torch.distributed.tensor was imported to make them.
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None)


def model_has_dtensor(model: nn.Module) -> bool:
    """Whether any parameter of ``model`` is a ``DTensor`` (sharded by tensor parallelism or FSDP2)."""
    dtensor = _dtensor_type()
    return dtensor is not None and any(isinstance(p, dtensor) for p in model.parameters())


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def get_model_tp_size(model: nn.Module) -> int | None:
    """How many processes ``model`` is split over by tensor parallelism; None when it is not.

    Read from the ``"tp"`` dimension of its ``DTensor`` parameters' device mesh, else from what
    transformers records: ``model.tp_size`` (before 5), ``model.config.distributed_config.tp_size``
    (5 on; an object, or a dict once the config went through JSON), or ``model._tp_size``.
    """
    dtensor = _dtensor_type()
    if dtensor is not None:
        for param in model.parameters():
            if isinstance(param, dtensor):
                mesh = param.device_mesh  # type: ignore[attr-defined]
                names = mesh.mesh_dim_names or ()
                if "tp" in names:
                    return int(mesh["tp"].size())
    size = _positive_int(getattr(model, "tp_size", None))
    if size is not None:
        return size
    distributed = getattr(getattr(model, "config", None), "distributed_config", None)
    if isinstance(distributed, dict):
        size = _positive_int(distributed.get("tp_size"))
    else:
        size = _positive_int(getattr(distributed, "tp_size", None))
    return size if size is not None else _positive_int(getattr(model, "_tp_size", None))
