"""Which sub-modules FSDP shards on their own (upstream's auto-wrap policies, for FSDP2).

``transformer_based_wrap`` picks every module whose class is named in ``transformer_cls_names_to_wrap``
(or in the model's ``_no_split_modules`` when no names are given); ``size_based_wrap`` picks a module
once the parameters it holds outside already-picked descendants reach ``min_num_params`` (FSDP1's
recursive rule); ``no_wrap`` picks none. A callable policy is called as FSDP1's policies are:
``policy(module=m, recurse=False, nonwrapped_numel=n)``. The root is always sharded last, by the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn


def module_class_names(model: nn.Module) -> list[str]:
    """The distinct class names of ``model``'s modules, in first-seen order (for error messages)."""
    return list(dict.fromkeys(type(m).__name__ for m in model.modules()))


def _transformer_classes(plugin: Any, model: nn.Module) -> set[str]:
    names = plugin.transformer_cls_names_to_wrap
    if names is None:
        names = list(getattr(model, "_no_split_modules", None) or [])
    present = set(module_class_names(model))
    missing = [n for n in names if n not in present]
    if missing:
        raise ValueError(
            f"transformer_cls_names_to_wrap (--fsdp_transformer_layer_cls_to_wrap) names {missing}, which match no "
            f"module of {type(model).__name__}. Its module classes are: {', '.join(module_class_names(model))}."
        )
    if not names:
        raise ValueError(
            "auto_wrap_policy='transformer_based_wrap' needs the block classes to shard: set "
            "transformer_cls_names_to_wrap (--fsdp_transformer_layer_cls_to_wrap), e.g. to one of "
            f"{', '.join(module_class_names(model))}."
        )
    return set(names)


def wrap_predicate(plugin: Any, model: nn.Module) -> Callable[[nn.Module], bool]:
    """``module -> shard it on its own`` for ``plugin.auto_wrap_policy`` over ``model``."""
    policy = plugin.auto_wrap_policy
    if policy is None or policy == "no_wrap":
        return lambda module: False
    if policy == "transformer_based_wrap":
        classes = _transformer_classes(plugin, model)
        return lambda module: type(module).__name__ in classes
    if policy == "size_based_wrap":
        picked = set(map(id, _size_based(model, int(plugin.min_num_params or 0))))
        return lambda module: id(module) in picked
    if callable(policy):
        return lambda module: bool(policy(module=module, recurse=False, nonwrapped_numel=_numel(module)))
    raise ValueError(
        f"auto_wrap_policy={policy!r} is not transformer_based_wrap, size_based_wrap, no_wrap or a callable."
    )


def _numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _size_based(model: nn.Module, min_num_params: int) -> list[nn.Module]:
    picked: list[nn.Module] = []

    def visit(module: nn.Module) -> int:
        # Parameters of this module not yet inside a picked descendant.
        remaining = sum(visit(child) for child in module.children())
        remaining += sum(p.numel() for p in module.parameters(recurse=False))
        if module is not model and min_num_params > 0 and remaining >= min_num_params:
            picked.append(module)
            return 0
        return remaining

    visit(model)
    return picked


def modules_to_shard(plugin: Any, model: nn.Module) -> list[nn.Module]:
    """The non-root modules to shard on their own, children before parents (``fully_shard`` order)."""
    predicate = wrap_predicate(plugin, model)
    ordered: list[nn.Module] = []

    def visit(module: nn.Module) -> None:
        for child in module.children():
            visit(child)
        if module is not model and predicate(module):
            ordered.append(module)

    visit(model)
    return ordered
