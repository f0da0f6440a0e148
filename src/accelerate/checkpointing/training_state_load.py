"""Loading what ``save_training_state`` wrote: verified, in any world size, upstream folders too.

Every file named in the manifest is checked (size and checksum) as it is read; a folder without our
manifest is loaded unverified with one warning (upstream's folders), or refused when it carries our
own traces (then its manifest was lost). Models are read while the optimizer files are read on a thread.

A load is all or nothing: everything is first read, verified and checked against the objects it is
for (keys and shapes of each model, parameter groups and state shapes of each optimizer, generator
states, a registered object for every saved one), and only when that succeeded on every process
does the first object change. A failed load leaves every object as it was.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accelerate.checkpointing.checkpoint_io import CheckpointIO
from accelerate.checkpointing.load_checks import (
    _check_custom_count,
    _check_loader_state,
    _check_pending_gradients,
    _check_scaler_state,
    _model_problems,
    _optimizer_problems,
    _processes,
    _world_size_note,
)
from accelerate.checkpointing.load_reader import (  # noqa: F401 - _open_folder, _Reader: functional.py's
    _fill_optimizer_state,
    _live_state,
    _open_folder,
    _Reader,
    fill_tied_keys,
)
from accelerate.checkpointing.rng import (
    PENDING_GRADIENTS,
    check_rng_state,
    load_rng_file,
    restore_rng_state,
    rng_file_name,
)
from accelerate.checkpointing.training_state import (
    DATALOADER_STATE_NAME,
    OPTIMIZER_NAME,
    SCALER_NAME,
    SCHEDULER_NAME,
    ProcessInfo,
    custom_name,
    indexed_name,
    model_names,
)
from accelerate.collectives.agreement import agree_on_failure
from accelerate.storage.durable_io import MANIFEST_NAME
from accelerate.storage.errors import CheckpointError
from accelerate.storage.model_files import (
    load_state_dict_file,
)
from accelerate.storage.verified_read import load_verified

logger = logging.getLogger(__name__)

__all__ = ["load_training_state"]


_Apply = Callable[[], None]


class _Plan:
    """What the load will do, built while everything is read and checked; nothing is applied yet.

    Applied in this order: ``sharded`` (the FSDP parts: collectives, so before anything that could
    fail on one process alone; the DCP layouts still verify their files inside them), ``own_code``
    (the registered objects' and loaders' own ``load_state_dict``, which no check can fully foresee;
    a prepared loader's position was checked against this world size beforehand),
    then ``checked`` and the optimizer files, which were fully checked beforehand.
    """

    def __init__(self, io: CheckpointIO) -> None:
        self.io = io  # the strategy's checkpoint I/O: which parts its own hooks load
        self.sharded: list[_Apply] = []
        self.own_code: list[_Apply] = []
        self.checked: list[_Apply] = []
        # (optimizer, path, loaded) of plain optimizer files: copied into the optimizer on a thread.
        self.optimizer_files: list[tuple[Any, Path, Any]] = []
        self.step: int | None = None


def _plan_models(
    reader: _Reader, models: Sequence[nn.Module], strict: bool, state: ProcessInfo, plan: _Plan
) -> None:
    for i, model in enumerate(models):
        if plan.io.has_model(reader, i):
            # Read inside their own collectives, so loaded (first) once every process agreed.
            plan.sharded.append(_own_layout_model_loader(plan.io, reader, i, model, strict, state))
            continue
        names = [n for n in model_names(i) if reader.has(n)]
        if not names:
            raise CheckpointError(
                f"Checkpoint {reader.directory} has no weights for model {i} (looked for {' or '.join(model_names(i))}); "
                "was it saved with fewer models?"
            )
        state_dict = load_state_dict_file(reader.path(names[0]), reader.record(names[0]))
        fill_tied_keys(model, state_dict)
        if plan.io.holds_full_model(model):  # saved unsharded, loaded sharded
            plan.sharded.append(_full_model_loader(plan.io, model, state_dict, strict))
            continue
        problems = _model_problems(model, state_dict, strict)
        if problems:
            saved_world = reader.manifest.world_size if reader.manifest is not None else None
            # Only a shape can depend on the number of processes; a renamed layer cannot.
            shapes = any(problem.startswith("size mismatch for ") for problem in problems)
            raise CheckpointError(
                f"Loading {names[0]} into model {i} ({type(model).__name__}) with strict={strict}: "
                f"{'; '.join(problems)}. Nothing was loaded."
                f"{_world_size_note(saved_world, state.num_processes) if shapes else ''}"
            )
        plan.checked.append(functools.partial(_load_model_state, model, state_dict, strict, names[0], i))


def _full_model_loader(io: CheckpointIO, model: nn.Module, state_dict: Any, strict: bool) -> _Apply:
    def load() -> None:
        io.load_full_model(model, state_dict, strict=strict)

    return load


def _own_layout_model_loader(
    io: CheckpointIO, reader: _Reader, index: int, model: nn.Module, strict: bool, state: ProcessInfo
) -> _Apply:
    def load() -> None:
        io.load_model(
            reader, index, model, strict=strict, rank=state.process_index, world_size=state.num_processes
        )

    return load


def _load_model_state(model: nn.Module, state_dict: Any, strict: bool, name: str, index: int) -> None:
    try:
        model.load_state_dict(state_dict, strict=strict)
    except RuntimeError as exc:
        raise CheckpointError(f"Loading {name} into model {index} ({type(model).__name__}): {exc}") from exc


def _plan_optimizers(
    reader: _Reader,
    optimizers: Sequence[Any],
    models: Sequence[nn.Module],
    state: ProcessInfo,
    pending: Sequence[Any],
    plan: _Plan,
) -> None:
    for i, (optimizer, future) in enumerate(zip(optimizers, pending, strict=True)):
        if future is None:
            plan.sharded.append(_own_layout_optimizer_loader(plan.io, reader, i, optimizer, models, state))
            continue
        loaded = future.result()
        name = indexed_name(OPTIMIZER_NAME, i, "bin")
        problems = _optimizer_problems(optimizer, loaded)
        if problems:
            raise CheckpointError(
                f"Checkpoint file {reader.path(name)} does not fit optimizer {i} "
                f"({type(optimizer).__name__}): {'; '.join(problems)}. Nothing was loaded; prepare the "
                "optimizer over the same parameters and groups as when saving."
            )
        if plan.io.holds_full_optimizer(optimizer, models):
            plan.sharded.append(
                functools.partial(
                    _load_converted_optimizer, plan.io, optimizer, models, reader.path(name), loaded
                )
            )
        else:
            plan.optimizer_files.append((optimizer, reader.path(name), loaded))


def _own_layout_optimizer_loader(
    io: CheckpointIO,
    reader: _Reader,
    index: int,
    optimizer: Any,
    models: Sequence[nn.Module],
    state: ProcessInfo,
) -> _Apply:
    def load() -> None:
        io.load_optimizer(
            reader, index, optimizer, models, rank=state.process_index, world_size=state.num_processes
        )

    return load


def _load_converted_optimizer(
    io: CheckpointIO, optimizer: Any, models: Sequence[nn.Module], path: Path, loaded: Any
) -> None:
    io.load_full_optimizer(optimizer, models, _fill_optimizer_state(_live_state(optimizer), path, loaded))


def _read_optional(reader: _Reader, name: str, what: str, strict: bool) -> Any:
    """The file's contents, or None when it is absent and may be (see below)."""
    if reader.has(name):
        return reader.torch_file(name, what)
    if strict and reader.manifest is not None:
        # Only our own checkpoints always carry these files; upstream writes a loader's state only
        # for stateful loaders (not its default), so a folder it saved must load without them.
        raise CheckpointError(
            f"Checkpoint {reader.directory} has no {name} for {what} (pass strict=False to skip it)"
        )
    logger.warning("Checkpoint %s has no %s; %s keeps its current state", reader.directory, name, what)
    return None


def _restore_pending_gradients(pending: Any, models: Sequence[nn.Module]) -> None:
    with torch.no_grad():
        for grads, model in zip(pending, models, strict=True):
            params = dict(model.named_parameters())
            for name, grad in grads.items():
                param = params[name]
                param.grad = grad.to(device=param.device, dtype=param.dtype)


def _plan_rng(
    reader: _Reader,
    models: Sequence[nn.Module],
    dataloaders: Sequence[Any],
    state: ProcessInfo,
    directory: Path,
    plan: _Plan,
) -> None:
    step = reader.manifest.step if reader.manifest is not None else None
    rng_name = rng_file_name(state.process_index)
    if not reader.has(rng_name):
        count = reader.manifest.world_size if reader.manifest is not None else None
        saved = "an unknown number of processes" if count is None else _processes(count)
        logger.warning(
            "Checkpoint %s has no %s (saved by %s, loading on %d); this process's random "
            "generators are not restored",
            directory,
            rng_name,
            saved,
            state.num_processes,
        )
        plan.step = step
        return
    path = reader.path(rng_name)
    rng_state = load_verified(path, reader.record(rng_name), load_rng_file)
    check_rng_state(rng_state, dataloaders, source=str(path))
    pending = rng_state.get(PENDING_GRADIENTS)
    restore_grads = _check_pending_gradients(pending, models, reader, state, directory)
    saved_step = rng_state.get("step")
    if step is None:
        step = int(saved_step or 0)
    elif saved_step is not None and int(saved_step) != step:
        # The random-states file is checksummed; the manifest's step alone could have been edited.
        raise CheckpointError(
            f"Checkpoint {directory}: {MANIFEST_NAME} says step {step} but the verified {rng_name} "
            f"says {int(saved_step)}; the manifest was edited. Load an earlier checkpoint."
        )
    plan.step = step

    def restore() -> None:
        restore_rng_state(rng_state, dataloaders)
        if restore_grads:
            _restore_pending_gradients(pending, models)

    plan.checked.append(restore)


def _plan_load(
    reader: _Reader,
    pool: ThreadPoolExecutor,
    *,
    state: ProcessInfo,
    models: Sequence[nn.Module],
    optimizers: Sequence[Any],
    schedulers: Sequence[Any],
    dataloaders: Sequence[Any],
    scaler: Any,
    custom_objects: Sequence[Any] | None,
    strict: bool,
    io: CheckpointIO,
) -> _Plan:
    """Reads and checks everything the load needs, in the order it is applied; changes nothing."""
    plan = _Plan(io)
    saved_world = reader.manifest.world_size if reader.manifest is not None else None
    if custom_objects is not None:
        _check_custom_count(reader, custom_objects)
    # Optimizer files (usually the largest) are read and verified on a thread while the models are
    # read: both release the GIL, so on a machine with a spare core the two overlap.
    pending = [
        None
        if plan.io.has_optimizer(reader, i)
        else pool.submit(
            reader.torch_file, indexed_name(OPTIMIZER_NAME, i, "bin"), f"optimizer {i}", mmap=True
        )
        for i in range(len(optimizers))
    ]
    try:
        # The objects' own load_state_dict may still fail: they run before anything checked.
        for i, obj in enumerate(custom_objects or ()):
            saved = reader.torch_file(custom_name(i), f"registered object {i} ({type(obj).__name__})")
            plan.own_code.append(functools.partial(obj.load_state_dict, saved))
        for i, loader in enumerate(dataloaders):
            if callable(getattr(loader, "load_state_dict", None)):
                name = indexed_name(DATALOADER_STATE_NAME, i, "bin")
                saved = _read_optional(reader, name, f"dataloader {i}", strict)
                if saved is not None:
                    _check_loader_state(loader, saved, reader.path(name), i, saved_world, state.num_processes)
                    plan.own_code.append(functools.partial(loader.load_state_dict, saved))
        _plan_models(reader, models, strict, state, plan)
    finally:
        for future in pending:  # none is left reading once this returns or raises
            if future is not None:
                future.exception()
    _plan_optimizers(reader, optimizers, models, state, pending, plan)
    for i, scheduler in enumerate(schedulers):
        saved = reader.torch_file(indexed_name(SCHEDULER_NAME, i, "bin"), f"scheduler {i}")
        plan.checked.append(functools.partial(scheduler.load_state_dict, saved))
    if scaler is not None:
        saved = _read_optional(reader, SCALER_NAME, "the GradScaler", strict)
        if saved is not None:
            _check_scaler_state(scaler, saved, reader.path(SCALER_NAME))
            plan.checked.append(functools.partial(scaler.load_state_dict, saved))
    _plan_rng(reader, models, dataloaders, state, reader.directory, plan)
    return plan


def _apply(plan: _Plan, models: Sequence[nn.Module], pool: ThreadPoolExecutor) -> None:
    for apply in (*plan.sharded, *plan.own_code):
        apply()
    # Each optimizer file's tensors are copied into the optimizer on the thread while the models take
    # theirs here (both release the GIL); load_state_dict then runs on this thread.
    copies = [
        (optimizer, pool.submit(_fill_optimizer_state, _live_state(optimizer), path, loaded))
        for optimizer, path, loaded in plan.optimizer_files
    ]
    for apply in plan.checked:
        apply()
    for optimizer, copy in copies:
        loaded = copy.result()
        if not plan.io.load_full_optimizer(optimizer, models, loaded):  # keyed by names: by name
            optimizer.load_state_dict(loaded)


def load_training_state(
    input_dir: str | os.PathLike[str],
    *,
    state: ProcessInfo,
    models: Sequence[nn.Module] = (),
    optimizers: Sequence[Any] = (),
    schedulers: Sequence[Any] = (),
    dataloaders: Sequence[Any] = (),
    scaler: Any = None,
    custom_objects: Sequence[Any] | None = None,
    strict: bool = True,
    io: CheckpointIO | None = None,
) -> dict[str, Any]:
    """Restores everything :func:`save_training_state` wrote; call it on every process.

    Works on folders saved by upstream Accelerate too (no manifest: loaded without checksum checks).
    All or nothing: every file is read and checked against the object it is for before the first
    object changes, and when any process finds a problem no process changes anything (see the
    module docstring).

    Args:
        strict: passed to each model's ``load_state_dict``; also, a dataloader or scaler given here
            whose state is absent from the checkpoint raises instead of logging a warning.
        custom_objects: the registered objects, in registration order. Every
            ``custom_checkpoint_{i}.pkl`` in the checkpoint must have one, as in upstream's
            ``load_state``. None (the default): the saved ones are not loaded here (see
            ``load_custom_state``).
        io: the strategy's checkpoint I/O (``Strategy.checkpoint_io()``); None: plain files.

    Returns:
        ``{"step": int, "verified": bool, "world_size": int | None}``; ``verified`` says whether
        checksums were checked (False for folders without our manifest).

    Raises:
        CheckpointError: naming the missing, truncated, corrupted or mismatched file (on every
            process, naming the processes that found it, when several take part).
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelerate-load") as pool:
        error: BaseException | None = None
        plan: _Plan | None = None
        reader: _Reader | None = None
        try:
            reader = _Reader(_open_folder(input_dir))
            plan = _plan_load(
                reader,
                pool,
                state=state,
                models=models,
                optimizers=optimizers,
                schedulers=schedulers,
                dataloaders=dataloaders,
                scaler=scaler,
                custom_objects=custom_objects,
                strict=strict,
                io=io if io is not None else CheckpointIO(),
            )
        except Exception as exc:  # every process learns of it below, before any applies anything
            error = exc
        agree_on_failure(
            error,
            what=f"load_state from {input_dir}",
            error_type=CheckpointError,
            note="nothing was loaded on any process: every object keeps its state",
        )
        assert plan is not None and reader is not None
        _apply(plan, models, pool)
    return {
        "step": int(plan.step or 0),
        "verified": reader.manifest is not None,
        "world_size": reader.manifest.world_size if reader.manifest is not None else None,
    }
