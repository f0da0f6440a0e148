"""Sharded (FSDP2) models in checkpoints: how to recognise them and move between full and sharded.

A model is *sharded* when any of its parameters is a ``torch.distributed.tensor.DTensor`` (what
``torch.distributed.fsdp.fully_shard`` leaves behind). Recognising it by its parameters, not by a
backend flag, keeps checkpointing independent of how the model was sharded.

Full state dicts are gathered with torch's ``get_model_state_dict(full_state_dict=True,
cpu_offload=True)``: only process 0 ends up holding the whole model (on the CPU), the others an
empty dict, so gathering never materialises N copies of the model.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn

from accelerate.storage.errors import CheckpointError

SHARDED_STATE_DICT = "SHARDED_STATE_DICT"
FULL_STATE_DICT = "FULL_STATE_DICT"
_STATE_DICT_TYPES = (SHARDED_STATE_DICT, FULL_STATE_DICT)

# Upstream's names, so checkpoints move between the two libraries.
FSDP_MODEL_NAME = "pytorch_model_fsdp"
OPTIMIZER_NAME = "optimizer"


def is_dtensor(tensor: Any) -> bool:
    """True for a ``DTensor``; without torch.distributed.tensor imported there can be none."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(tensor, module.DTensor)


def is_sharded_model(model: nn.Module) -> bool:
    """True when ``model`` holds DTensor parameters, i.e. it was sharded by FSDP2 (``fully_shard``)."""
    return any(is_dtensor(p) for p in model.parameters())


def normalize_state_dict_type(value: Any) -> str:
    """``SHARDED_STATE_DICT`` or ``FULL_STATE_DICT`` for the FSDP plugin's ``state_dict_type``.

    Accepts the enum, its name, upstream's integer values (FULL=1, SHARDED=3), or None (sharded).
    """
    if value is None:
        return SHARDED_STATE_DICT
    name = getattr(value, "name", value)
    if isinstance(name, int):
        name = {1: FULL_STATE_DICT, 3: SHARDED_STATE_DICT}.get(name, str(name))
    name = str(name).upper().rsplit(".", 1)[-1]
    if name not in _STATE_DICT_TYPES:
        raise ValueError(
            f"FSDP state_dict_type {value!r} is not supported for FSDP2 checkpoints; use one of "
            f"{', '.join(_STATE_DICT_TYPES)} (LOCAL_STATE_DICT is FSDP1-only)."
        )
    return name


def raw_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The ``torch.optim.Optimizer`` inside an ``AcceleratedOptimizer`` (or the optimizer itself)."""
    inner = optimizer
    while not isinstance(inner, torch.optim.Optimizer) and hasattr(inner, "optimizer"):
        inner = inner.optimizer
    # Unchecked: an object that is not an Optimizer and wraps none is taken as one (duck typing).
    found: torch.optim.Optimizer = inner
    return found


def optimizer_owner(optimizer: Any, models: Sequence[nn.Module]) -> int | None:
    """The index of the model whose parameters ``optimizer`` steps (None when it steps none of them)."""
    params = {id(p) for group in raw_optimizer(optimizer).param_groups for p in group["params"]}
    for index, model in enumerate(models):
        if any(id(p) in params for p in model.parameters()):
            return index
    return None


def model_file_name(index: int) -> str:
    """Upstream's full-state file: ``pytorch_model_fsdp.bin``, ``pytorch_model_fsdp_1.bin``, ..."""
    return f"{FSDP_MODEL_NAME}{'' if index == 0 else f'_{index}'}.bin"


def model_folder_name(index: int) -> str:
    """Upstream's sharded-state folder: ``pytorch_model_fsdp_0``, ``pytorch_model_fsdp_1``, ..."""
    return f"{FSDP_MODEL_NAME}_{index}"


def optimizer_file_name(index: int) -> str:
    return f"{OPTIMIZER_NAME}{'' if index == 0 else f'_{index}'}.bin"


def optimizer_folder_name(index: int) -> str:
    return f"{OPTIMIZER_NAME}_{index}"


# --- full <-> sharded -------------------------------------------------------------------------------
def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's state on process 0 (CPU tensors); an empty dict on the other processes.

    A collective for a sharded model: call it on every process. A model that is not sharded returns
    its own ``state_dict()`` on every process.

    Example:
        >>> state = full_state_dict(model)  # after fully_shard(model)
        >>> if rank == 0: save_file(state, "model.safetensors")
    """
    if not is_sharded_model(model):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return cast(dict[str, torch.Tensor], get_model_state_dict(model, options=options))


def full_optimizer_state_dict(model: nn.Module, optimizer: Any) -> dict[str, Any]:
    """The optimizer's whole state keyed by parameter names, on process 0 (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(model, raw_optimizer(optimizer), options=options)


def check_shapes(
    expected: Mapping[str, torch.Size], found: Mapping[str, torch.Size], *, source: str, strict: bool
) -> None:
    """Raises naming the first tensor whose saved shape differs from the model's (or is missing)."""
    for name, shape in expected.items():
        saved = found.get(name)
        if saved is None:
            if strict:
                raise CheckpointError(
                    f"{source} has no tensor {name!r} that the model has; was it saved from another model? "
                    "(pass strict=False to load the tensors it has)"
                )
            continue
        if tuple(saved) != tuple(shape):
            raise CheckpointError(
                f"{source}: tensor {name!r} has shape {tuple(saved)} in the checkpoint but "
                f"{tuple(shape)} in the model; load a checkpoint of this model's configuration."
            )
    if strict:
        unexpected = sorted(set(found) - set(expected))
        if unexpected:
            raise CheckpointError(
                f"{source} holds tensors the model lacks: {unexpected[:5]} (pass strict=False to ignore them)"
            )


def load_full_state_dict(model: nn.Module, state: Mapping[str, Any], *, strict: bool = True) -> None:
    """Loads a full (unsharded) state dict into ``model``, sharded or not; every process passes it.

    A sharded model takes from each tensor the shard its process holds.
    """
    shapes = {name: value.shape for name, value in model.state_dict().items()}
    check_shapes(shapes, {k: v.shape for k, v in state.items()}, source="The state dict", strict=strict)
    if not is_sharded_model(model):
        model.load_state_dict(dict(state), strict=strict)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    options = StateDictOptions(full_state_dict=True, strict=strict)
    set_model_state_dict(model, dict(state), options=options)


def load_full_optimizer_state_dict(model: nn.Module, optimizer: Any, state: Mapping[str, Any]) -> None:
    """Loads an optimizer state saved by a process that held the whole model.

    ``state`` is keyed by parameter names (what :func:`full_optimizer_state_dict` writes) or by
    position (``optimizer.state_dict()`` of an unsharded run); positions are mapped to the names of
    the parameters this optimizer steps, in its own order.
    """
    inner = raw_optimizer(optimizer)
    state = dict(state)
    if any(isinstance(key, int) for key in state.get("state", {})) or _positional_groups(state):
        state = _to_named(model, inner, state)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, inner, state, options=StateDictOptions(full_state_dict=True))


def _positional_groups(state: Mapping[str, Any]) -> bool:
    groups = state.get("param_groups") or []
    return any(isinstance(p, int) for group in groups for p in group.get("params", []))


def _to_named(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
    names = {id(p): _clean_name(n) for n, p in model.named_parameters()}
    ordered = [p for group in optimizer.param_groups for p in group["params"]]
    unknown = [i for i, p in enumerate(ordered) if id(p) not in names]
    if unknown:
        raise CheckpointError(
            f"The optimizer steps {len(unknown)} parameters that are not in the model it is loaded with; "
            "load it together with the model it was built for."
        )
    position = {i: names[id(p)] for i, p in enumerate(ordered)}
    saved = state.get("state", {})
    if len(ordered) != sum(len(g["params"]) for g in state.get("param_groups", [])):
        raise CheckpointError(
            f"The optimizer state holds {sum(len(g['params']) for g in state.get('param_groups', []))} "
            f"parameters but the optimizer steps {len(ordered)}; load the state of this optimizer."
        )
    groups = [{**g, "params": [position[int(i)] for i in g["params"]]} for g in state.get("param_groups", [])]
    return {"state": {position[int(i)]: v for i, v in saved.items()}, "param_groups": groups}


def _clean_name(name: str) -> str:
    # Names inside wrappers torch's state-dict helpers strip as well (activation checkpointing, compile).
    for prefix in ("_checkpoint_wrapped_module.", "_orig_mod."):
        name = name.replace(prefix, "")
    return name


def global_shapes(tensors: Iterable[tuple[str, Any]]) -> dict[str, torch.Size]:
    """Each tensor's full shape (a DTensor's global shape, not its local shard's)."""
    return {name: value.shape for name, value in tensors if isinstance(value, torch.Tensor)}
