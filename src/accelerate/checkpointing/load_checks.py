"""The checks a load runs before anything changes: would each object accept what the file holds?

Each function answers for one kind of object (a model's keys and shapes by torch's own rules, an
optimizer's groups and state shapes, a GradScaler's fields, accumulated gradients, registered
objects), without touching the object, so that ``load_training_state`` is all or nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accelerate.big_modeling.quantization.checks import quantization_mismatches
from accelerate.checkpointing.load_reader import _live_state, _Reader
from accelerate.checkpointing.training_state import (
    ProcessInfo,
    custom_name,
)
from accelerate.storage.errors import CheckpointError

logger = logging.getLogger(__name__)


_CUSTOM_FILE = re.compile(r"custom_checkpoint_(\d+)\.pkl")


def _saved_custom_indices(reader: _Reader) -> list[int]:
    if reader.manifest is not None:
        names: Sequence[str] = list(reader.manifest.files)
    else:
        names = [entry.name for entry in reader.directory.iterdir()]
    return sorted(int(m.group(1)) for name in names if (m := _CUSTOM_FILE.fullmatch(name)))


def _check_custom_count(reader: _Reader, custom_objects: Sequence[Any]) -> None:
    """Every saved registered object must have one to receive it (upstream raises too)."""
    unclaimed = [custom_name(i) for i in _saved_custom_indices(reader) if i >= len(custom_objects)]
    if unclaimed:
        raise CheckpointError(
            f"Checkpoint {reader.directory} holds the state of {len(unclaimed) + len(custom_objects)} "
            f"registered objects but {len(custom_objects)} are registered now, so "
            f"{', '.join(unclaimed)} would not be loaded. Call accelerator.register_for_checkpointing(obj) "
            "for each object, in the order used when saving, before load_state (or read the file "
            "yourself with accelerate.checkpointing.load_custom_state)."
        )


def _has_own_loading(model: nn.Module) -> bool:
    """True when loading runs code of the model's own (hooks, overrides) that may change the keys."""
    if type(model).load_state_dict is not nn.Module.load_state_dict:
        return True
    for module in model.modules():
        if any(
            getattr(module, hooks, None)
            for hooks in (
                "_load_state_dict_pre_hooks",
                "_load_state_dict_post_hooks",
                "_state_dict_hooks",
                "_state_dict_pre_hooks",
            )
        ):
            return True
        loader = type(module)._load_from_state_dict
        if loader is not nn.Module._load_from_state_dict and not isinstance(
            module, nn.modules.batchnorm._NormBase
        ):
            return True
    return False


def _model_problems(model: nn.Module, state_dict: Mapping[str, Any], strict: bool) -> list[str]:
    """What ``model.load_state_dict(state_dict, strict)`` would reject, found without changing the model.

    The rules are torch's: shapes must match (a 0-dim tensor also takes a 1-element one), and with
    ``strict`` no key may be missing or unexpected. A model whose loading runs its own code (hooks,
    overridden ``_load_from_state_dict``) is left to torch, which then checks while it copies.
    """
    # Quantized and unquantized layers can have equal shapes (int8 weights): caught by name first.
    quantized = quantization_mismatches(model, state_dict)
    if quantized:
        return quantized
    if _has_own_loading(model):
        return []
    expected = model.state_dict(keep_vars=True)
    problems: list[str] = []
    for key, value in state_dict.items():
        target = expected.get(key)
        if not isinstance(target, torch.Tensor) or key.endswith("_extra_state"):
            continue
        if not torch.overrides.is_tensor_like(value):
            problems.append(f"{key} is a {type(value).__name__} in the checkpoint, not a tensor")
            continue
        if nn.parameter.is_lazy(target):
            continue
        shape = value.shape
        if target.dim() == 0 and tuple(shape) == (1,):
            continue
        if shape != target.shape:
            problems.append(
                f"size mismatch for {key}: shape {tuple(shape)} in the checkpoint, "
                f"{tuple(target.shape)} in the model"
            )
    if strict:
        # BatchNorm fills a missing num_batches_tracked itself (state dicts from before it existed).
        filled = {
            f"{name}.num_batches_tracked" if name else "num_batches_tracked"
            for name, module in model.named_modules()
            if isinstance(module, nn.modules.batchnorm._NormBase) and module.track_running_stats
        }
        missing = [key for key in expected if key not in state_dict and key not in filled]
        unexpected = [key for key in state_dict if key not in expected]
        if missing:
            problems.append(f"missing keys {missing[:20]}{' ...' if len(missing) > 20 else ''}")
        if unexpected:
            problems.append(f"unexpected keys {unexpected[:20]}{' ...' if len(unexpected) > 20 else ''}")
    return problems


def _optimizer_problems(optimizer: Any, loaded: Any) -> list[str]:
    """What would make ``optimizer.load_state_dict(loaded)`` fail, or load state of other shapes."""
    if not isinstance(loaded, Mapping) or not isinstance(loaded.get("param_groups"), list):
        return [f"it holds a {type(loaded).__name__} without param_groups, not an optimizer state"]
    saved_state = loaded.get("state", {})
    if not isinstance(saved_state, Mapping):
        return ["its state is not a mapping"]
    if any(isinstance(key, str) for key in saved_state):
        return []  # keyed by parameter names (FSDP's full state): matched by name when applied
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, list):
        return []
    saved_groups = loaded["param_groups"]
    if len(saved_groups) != len(groups):
        return [f"{len(saved_groups)} parameter groups in the file, {len(groups)} in the optimizer"]
    problems = []
    for g, (saved, live) in enumerate(zip(saved_groups, groups)):
        saved_params = saved.get("params", ()) if isinstance(saved, Mapping) else ()
        if len(saved_params) != len(live.get("params", ())):
            problems.append(
                f"parameter group {g} has {len(saved_params)} parameters in the file, "
                f"{len(live.get('params', ()))} in the optimizer"
            )
    if problems:
        return problems
    count = sum(len(group.get("params", ())) for group in groups)
    live_state = _live_state(optimizer)
    for index, entry in saved_state.items():
        if not isinstance(index, int) or not 0 <= index < count:
            problems.append(f"state for parameter {index!r}, but the optimizer has {count} parameters")
            continue
        live = live_state.get(index)
        if not isinstance(entry, Mapping) or not isinstance(live, Mapping):
            continue
        for key, value in entry.items():
            target = live.get(key)
            if (
                isinstance(value, torch.Tensor)
                and type(target) is torch.Tensor  # not a DTensor: a sharded state has its local shape
                and value.shape != target.shape
            ):
                problems.append(
                    f"state {key!r} of parameter {index} has shape {tuple(value.shape)} in the file, "
                    f"{tuple(target.shape)} in the optimizer"
                )
    return problems[:10]


def _check_loader_state(
    loader: Any, saved: Any, path: Path, index: int, saved_world: int | None, world: int
) -> None:
    """Would the prepared loader accept the saved position at this world size? Asked before anything loads.

    Prepared loaders answer through ``check_state_dict`` (the same checks their ``load_state_dict``
    runs); other loaders are left to their own ``load_state_dict``. A mid-epoch position of an
    iterable or dispatched loader cannot be re-split over another number of processes: caught
    here, an elastic group that re-formed at another size stops before its first step instead of
    training from a wrong position.
    """
    check = getattr(loader, "check_state_dict", None)
    if not callable(check) or not isinstance(saved, Mapping):
        return
    try:
        check(dict(saved))
    except (KeyError, ValueError) as exc:
        # A KeyError's str() quotes its message; its first argument reads as the sentence it is.
        reason = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        sizes = f"saved by {_processes(saved_world)}" if saved_world is not None else "saved by ? processes"
        raise CheckpointError(
            f"Checkpoint file {path} does not fit dataloader {index} ({type(loader).__name__}; {sizes}, "
            f"loading on {world}): {reason.rstrip('.')}. Nothing was loaded."
        ) from exc


def _processes(count: int) -> str:
    return f"{count} process{'' if count == 1 else 'es'}"


def _world_size_note(saved_world: int | None, world: int) -> str:
    """For a shape mismatch: the world size changed, and a tensor sized by it cannot be resharded."""
    if saved_world is None or saved_world == world:
        return ""
    return (
        f" The checkpoint was saved by {_processes(saved_world)} and this run has {world}: a tensor whose "
        f"shape depends on the number of processes cannot be resharded; resume with {_processes(saved_world)}, "
        "or save that tensor at a size that does not depend on it."
    )


_SCALER_KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")


def _check_scaler_state(scaler: Any, saved: Any, path: Path) -> None:
    """What ``GradScaler.load_state_dict`` needs, checked before it sets the first field."""
    if not isinstance(scaler, torch.amp.GradScaler) or not scaler.is_enabled():
        return
    if not isinstance(saved, Mapping) or not saved:
        raise CheckpointError(
            f"Checkpoint file {path} holds no GradScaler state (saved from a disabled scaler?); nothing was loaded"
        )
    missing = [key for key in _SCALER_KEYS if key not in saved]
    if missing:
        raise CheckpointError(
            f"Checkpoint file {path} lacks the GradScaler fields {missing}; nothing was loaded"
        )


def _check_pending_gradients(
    pending: Any, models: Sequence[nn.Module], reader: _Reader, state: ProcessInfo, directory: Path
) -> bool:
    """Whether to put back the gradients of an unfinished accumulation window (see ``save_training_state``)."""
    if not pending:
        return False
    saved_world = reader.manifest.world_size if reader.manifest is not None else None
    if saved_world is not None and saved_world != state.num_processes:
        logger.warning(
            "Checkpoint %s was saved in the middle of a gradient accumulation window by %d processes; "
            "their local gradients cannot be split over %d, so the window restarts without them",
            directory,
            saved_world,
            state.num_processes,
        )
        return False
    if len(pending) != len(models):
        raise CheckpointError(
            f"Checkpoint {directory} holds accumulated gradients of {len(pending)} models, but "
            f"{len(models)} are prepared; prepare the same models as when saving."
        )
    for index, (grads, model) in enumerate(zip(pending, models, strict=True)):
        params = dict(model.named_parameters())
        unknown = sorted(set(grads) - set(params))
        if unknown:
            raise CheckpointError(
                f"Checkpoint {directory}: accumulated gradients of model {index} name parameters the "
                f"model lacks: {unknown[:5]}"
            )
        wrong = sorted(name for name, grad in grads.items() if tuple(grad.shape) != tuple(params[name].shape))
        if wrong:
            raise CheckpointError(
                f"Checkpoint {directory}: accumulated gradients of model {index} have other shapes than "
                f"the parameters {wrong[:5]}"
            )
    return True
