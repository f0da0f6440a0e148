"""Upstream's functional checkpoint interface (``accelerate.checkpointing.save_accelerator_state`` ...).

The same files as ``Accelerator.save_state``, written the same way (see training_state.py): staged,
fsynced, checksummed, committed by the manifest written last. These functions take the objects
explicitly instead of reading them off an Accelerator, for code that drives the pieces itself.

``save_custom_state`` into a committed checkpoint commits a new manifest that lists the added file
(the other files are hard-linked into the staging folder, not copied), so the checkpoint is complete
with or without it and loading verifies it like every other file. Into a folder without a manifest
it writes the file atomically (temporary name, fsync, rename), as an unverified file.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

from accelerate.checkpointing.load_reader import _open_folder, _Reader
from accelerate.checkpointing.single_file import host_copy_without_strategy
from accelerate.checkpointing.training_state import custom_name, save_training_state
from accelerate.checkpointing.training_state_load import load_training_state
from accelerate.storage.atomic import AtomicCheckpoint, read_manifest
from accelerate.storage.durable_io import FileRecord, fsync_dir, save_torch
from accelerate.storage.entry_names import entry_path

logger = logging.getLogger(__name__)

__all__ = ["load_accelerator_state", "load_custom_state", "save_accelerator_state", "save_custom_state"]


def _state_for(process_index: int, call: str) -> Any:
    from accelerate.state import PartialState

    state = PartialState()
    if process_index != state.process_index:
        raise ValueError(
            f"{call}(process_index={process_index}) is not this process (process {state.process_index} of "
            f"{state.num_processes}); pass `accelerator.process_index` and call it on every process"
        )
    return state


def save_accelerator_state(
    output_dir: str | os.PathLike[str],
    model_states: Sequence[Any],
    optimizers: Sequence[Any],
    schedulers: Sequence[Any],
    dataloaders: Sequence[Any],
    process_index: int,
    step: int,
    scaler: Any = None,
    save_on_each_node: bool = False,
    safe_serialization: bool = True,
) -> Path:
    """Writes a training checkpoint to ``output_dir``, as ``Accelerator.save_state`` does; call it on every process.

    Args:
        output_dir: the checkpoint folder (an existing checkpoint there is replaced atomically).
        model_states: one state dict per model (``accelerator.get_state_dict(model)``).
        optimizers, schedulers: objects with ``state_dict()``.
        dataloaders: prepared loaders (their position is saved) or any loaders (their sampler's generator).
        process_index: this process's index (``accelerator.process_index``).
        step: the training step, kept in the manifest and restored by :func:`load_accelerator_state`.
        scaler: the fp16 ``GradScaler``, if any.
        save_on_each_node: each node's local main process writes its own copy (node-local disks).
        safe_serialization: models as safetensors (default) or ``pytorch_model*.bin``.

    Returns:
        The committed folder.

    Example:
        >>> save_accelerator_state("ckpt", [accelerator.get_state_dict(model)], [optimizer], [], [loader],
        ...                        accelerator.process_index, step=100)
    """
    state = _state_for(process_index, "save_accelerator_state")
    return save_training_state(
        output_dir,
        state=state,
        models_state_dicts=list(model_states),
        optimizers=list(optimizers),
        schedulers=list(schedulers),
        dataloaders=list(dataloaders),
        scaler=scaler,
        step=step,
        safe_serialization=safe_serialization,
        save_on_each_node=save_on_each_node,
        host_copy=host_copy_without_strategy,
    )


_MAP_LOCATIONS = (None, "cpu", "on_device")


def check_load_options(call: str, map_location: Any, load_kwargs: dict[str, Any] | None) -> None:
    """Checks upstream's ``map_location`` and ``load_kwargs`` of a load, before anything is read.

    Every accepted ``map_location`` asks for what loading does anyway: files are read onto the CPU
    and copied to where each model and optimizer lives. ``load_kwargs`` may only repeat
    ``weights_only=True`` (files are never unpickled with code).
    """
    if map_location not in _MAP_LOCATIONS:
        # Upstream's opening words (callers match on them), then what is accepted.
        raise TypeError(
            f"Unsupported optimizer map location passed to {call}(map_location={map_location!r}): use None, "
            "'cpu' or 'on_device' (the state is read onto the CPU and copied to where each model and optimizer "
            "lives)"
        )
    unsupported = {k: v for k, v in (load_kwargs or {}).items() if not (k == "weights_only" and v is True)}
    if unsupported:
        raise ValueError(
            f"{call}(load_kwargs={unsupported!r}) is not supported: checkpoint files are read with "
            "torch.load(weights_only=True) and no other options, so loading runs no code from them"
        )


def load_accelerator_state(
    input_dir: str | os.PathLike[str],
    models: Sequence[nn.Module],
    optimizers: Sequence[Any],
    schedulers: Sequence[Any],
    dataloaders: Sequence[Any],
    process_index: int,
    scaler: Any = None,
    map_location: str | None = None,
    load_kwargs: dict[str, Any] | None = None,
    **load_model_func_kwargs: Any,
) -> dict[str, Any]:
    """Restores what :func:`save_accelerator_state` (or ``save_state``) wrote; call it on every process.

    Args:
        input_dir: the checkpoint folder.
        models, optimizers, schedulers, dataloaders, scaler: restored in place, in the saved order.
        process_index: this process's index (its random-number states are restored).
        map_location: ``None``, ``"cpu"`` or ``"on_device"``: files are always read onto the CPU and
            copied into each object where it lives, which is what all three ask for.
        load_kwargs: torch.load options; only ``weights_only=True`` is accepted (files are never
            unpickled with code).
        **load_model_func_kwargs: ``strict`` for the models' ``load_state_dict`` (default True).

    Returns:
        ``{"step": int, "verified": bool, "world_size": int | None}`` (``verified``: checksums checked).

    Example:
        >>> step = load_accelerator_state("ckpt", [model], [optimizer], [], [loader], accelerator.process_index)["step"]
    """
    check_load_options("load_accelerator_state", map_location, load_kwargs)
    strict = bool(load_model_func_kwargs.pop("strict", True))
    if load_model_func_kwargs:
        raise TypeError(
            f"load_accelerator_state got unexpected keyword arguments {sorted(load_model_func_kwargs)}; "
            "the models' load_state_dict accepts `strict` only"
        )
    state = _state_for(process_index, "load_accelerator_state")
    return load_training_state(
        input_dir,
        state=state,
        models=list(models),
        optimizers=list(optimizers),
        schedulers=list(schedulers),
        dataloaders=list(dataloaders),
        scaler=scaler,
        strict=strict,
    )


def _check_stateful(obj: Any, call: str, method: str) -> None:
    if not callable(getattr(obj, method, None)):
        raise TypeError(f"{call} needs an object with a `{method}()` method, got a {type(obj).__name__}")


def _link_or_copy(source: Path, destination: Path) -> None:
    try:
        os.link(source, destination)
    except OSError:  # a filesystem without hard links
        shutil.copy2(source, destination)


def _add_to_committed(folder: Path, name: str, obj_state: Any) -> None:
    """Commits ``folder``'s checkpoint again with ``name`` added (or replaced), atomically."""
    manifest = read_manifest(folder)
    assert manifest is not None  # the caller checked
    ckpt = AtomicCheckpoint(folder)
    staging = ckpt.prepare()  # in place: the folder exists
    try:
        records: dict[str, FileRecord] = dict(manifest.files)
        for existing in records:
            if existing != name:
                _link_or_copy(entry_path(folder, existing), entry_path(staging, existing))
        records[name] = save_torch(obj_state, staging / name)
        ckpt.update(records)
        ckpt.commit(step=manifest.step, world_size=manifest.world_size, extra=manifest.extra)
    except BaseException:
        ckpt.abort()
        raise


def save_custom_state(
    obj: Any, path: str | os.PathLike[str], index: int = 0, save_on_each_node: bool = False
) -> Path:
    """Saves ``obj.state_dict()`` as ``custom_checkpoint_{index}.pkl`` in the checkpoint folder ``path``.

    Writes on the main process only (each node's with ``save_on_each_node``); see the module docstring
    for how the file joins a committed checkpoint. Returns the file's path.

    Example:
        >>> save_custom_state(ema, "ckpt", index=0)
    """
    _check_stateful(obj, "save_custom_state", "state_dict")
    from accelerate.state import PartialState

    state = PartialState()
    folder = Path(path)
    name = custom_name(index)
    if not (state.is_local_main_process if save_on_each_node else state.is_main_process):
        return folder / name
    obj_state = host_copy_without_strategy(obj.state_dict())
    if folder.is_dir() and read_manifest(folder) is not None:
        _add_to_committed(folder, name, obj_state)
        return folder / name
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".partial-{name}"
    try:
        save_torch(obj_state, partial, checksum=False)
        os.replace(partial, folder / name)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    fsync_dir(folder)
    return folder / name


def load_custom_state(obj: Any, path: str | os.PathLike[str], index: int = 0) -> None:
    """Restores ``obj`` from ``custom_checkpoint_{index}.pkl`` in ``path`` (verified against the manifest).

    Raises:
        CheckpointError: the file is missing, truncated or corrupted.
    """
    _check_stateful(obj, "load_custom_state", "load_state_dict")
    reader = _Reader(_open_folder(path))
    name = custom_name(index)
    obj.load_state_dict(reader.torch_file(name, f"custom object {index} ({type(obj).__name__})"))
