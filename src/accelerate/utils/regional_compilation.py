"""Regional compilation: compile each repeated block of a model once instead of the whole model.

Transformer-like models are mostly a ``ModuleList`` of identical blocks. Compiling the blocks (not
the whole model) lets torch reuse one compiled graph for all of them, which cuts compile time by
about the number of blocks for the same speed-up at run time.
"""

from __future__ import annotations

import sys
from typing import Any, cast

import torch
from torch import nn


def _optimized_module_type() -> type | None:
    # torch.compile loads torch._dynamo; if it is not loaded, nothing can be compiled yet, and
    # importing it just to say so would cost seconds.
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    return getattr(eval_frame, "OptimizedModule", None)


def is_compiled_module(module: Any) -> bool:
    """Whether ``module`` is what ``torch.compile(module)`` returns."""
    optimized = _optimized_module_type()
    return optimized is not None and isinstance(module, optimized)


def has_compiled_regions(module: nn.Module) -> bool:
    """Whether ``module`` or any module inside it was compiled (as :func:`compile_regions` does)."""
    optimized = _optimized_module_type()
    if optimized is None:
        return False
    return any(isinstance(sub, optimized) for sub in module.modules())


def is_repeated_blocks(module: nn.Module) -> bool:
    """Whether ``module`` is a non-empty ``ModuleList`` whose entries are all of one class."""
    if not isinstance(module, nn.ModuleList) or len(module) == 0:
        return False
    first = type(module[0])
    return all(type(block) is first for block in module)


def has_repeated_blocks(module: nn.Module) -> bool:
    """Whether ``module`` holds (or is) a list of repeated blocks anywhere."""
    return any(is_repeated_blocks(sub) for sub in module.modules())


def _compiled_copy(module: nn.Module, compile_kwargs: dict[str, Any]) -> nn.Module:
    if is_repeated_blocks(module):
        blocks = cast(nn.ModuleList, module)
        return nn.ModuleList([cast(nn.Module, torch.compile(block, **compile_kwargs)) for block in blocks])
    if has_repeated_blocks(module):
        # A shallow copy whose children are replaced: parameters and buffers stay shared with the original.
        copy = type(module).__new__(type(module))
        copy.__dict__.update(module.__dict__)
        copy._modules = {
            name: _compiled_copy(child, compile_kwargs) for name, child in module.named_children()
        }
        return copy
    compiled: nn.Module = torch.compile(module, **compile_kwargs)  # type: ignore[assignment]
    return compiled


def compile_regions(module: nn.Module, **compile_kwargs: Any) -> nn.Module:
    """A copy of ``module`` in which each repeated block is compiled with ``torch.compile(**compile_kwargs)``.

    Every module on the way down to a list of repeated blocks is copied (sharing parameters and buffers
    with ``module``: training one trains the other); each block of the list is compiled on its own and
    every other child on the way is compiled whole. A module without repeated blocks is compiled whole.
    The original is kept as ``_orig_mod``, as ``torch.compile`` does, so ``unwrap_model`` finds it.

    Example:
        >>> model = compile_regions(model, mode="reduce-overhead")
    """
    compiled = _compiled_copy(module, compile_kwargs)
    if "_orig_mod" not in compiled.__dict__:
        compiled.__dict__["_orig_mod"] = module
    return compiled


def _compile_regions_in_place(module: nn.Module, compile_kwargs: dict[str, Any]) -> None:
    # As _compiled_copy, but each module compiles itself (nn.Module.compile): no copy, no wrapper, so
    # the hooks an engine installed on the blocks (DeepSpeed's parameter fetching, FSDP2's all-gather
    # and reshard) stay on the modules that are called.
    if is_repeated_blocks(module):
        for block in cast(nn.ModuleList, module):
            block.compile(**compile_kwargs)
    elif has_repeated_blocks(module):
        for child in module.children():
            _compile_regions_in_place(child, compile_kwargs)
    else:
        module.compile(**compile_kwargs)


def _inner_model(module: nn.Module) -> nn.Module:
    # An engine or DDP-style wrapper keeps the model as ``.module``; without repeated blocks the model
    # (not the wrapper and its bookkeeping) is what gets compiled whole.
    inner = module._modules.get("module")
    return inner if isinstance(inner, nn.Module) and len(module._modules) == 1 else module


def compile_regions_deepspeed(module: nn.Module, **compile_kwargs: Any) -> None:
    """Regional compilation, in place, for a model DeepSpeed runs (its engine, or the engine's ``.module``).

    Each block of a list of repeated blocks is compiled with ``block.compile(**compile_kwargs)``; the
    other children on the way down are compiled whole, and a model without repeated blocks is compiled
    whole. Unlike :func:`compile_regions` nothing is copied or wrapped: ZeRO-3's hooks on the blocks
    keep firing. Returns None.

    Example:
        >>> compile_regions_deepspeed(engine.module, backend="inductor")
    """
    _compile_regions_in_place(_inner_model(module), compile_kwargs)


def compile_regions_fsdp2(module: nn.Module, **compile_kwargs: Any) -> None:
    """Regional compilation, in place, for an FSDP2 model (``fully_shard`` applied to it and its blocks).

    As :func:`compile_regions_deepspeed`: each repeated block compiles itself (``block.compile``), so
    the per-block all-gather/reshard hooks ``fully_shard`` installed still run around each compiled
    block (a ``torch.compile`` wrapper would bypass them). Returns None.

    Example:
        >>> compile_regions_fsdp2(model, backend="inductor")  # after fully_shard
    """
    _compile_regions_in_place(_inner_model(module), compile_kwargs)
