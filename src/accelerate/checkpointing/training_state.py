"""The full training state behind ``Accelerator.save_state`` / ``load_state``.

Layout (upstream Accelerate's names, so checkpoints move between the two libraries)::

    model.safetensors, model_1.safetensors, ...   (pytorch_model.bin, pytorch_model_1.bin with safe_serialization=False)
    optimizer.bin, optimizer_1.bin, ...           torch.save(optimizer.state_dict())
    scheduler.bin, scheduler_1.bin, ...           torch.save(scheduler.state_dict())
    dl_state_dict.bin, dl_state_dict_1.bin, ...   torch.save(dataloader.state_dict()), position + sampler
    scaler.pt                                     torch.save(grad_scaler.state_dict())
    custom_checkpoint_0.pkl, ...                  torch.save(obj.state_dict()) for register_for_checkpointing
    random_states_{rank}.pkl                      one per process, see rng.py
    accelerate_manifest.json                      ours: sizes, checksums, world size, step; written last

Everything is read back with ``torch.load(weights_only=True)`` or the safetensors format: loading a
checkpoint runs no code from it. A registered object whose ``state_dict()`` holds custom classes must
have them allowed with ``torch.serialization.add_safe_globals`` (the error says which).

Saving is three steps, each ending in one exchange between ranks (``agree_on_failure``: a failure
on one rank raises on every rank, naming it, instead of leaving the others waiting). Shared
filesystem, as upstream assumes. *Stage*: the main process (with ``save_on_each_node``, each node's
local main) recovers leftovers of an interrupted save and creates the staging folder, and tells the
others where it is. *Write*: every rank writes its own ``random_states_{rank}.pkl``, the writer the
shared files; the ranks exchange their file records. *Commit*: the writer writes the manifest and
publishes the folder (see atomic.py); the last exchange tells every rank the commit happened before
any caller removes old checkpoints.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from accelerate.checkpointing.objects import check_checkpointable
from accelerate.checkpointing.rng import (
    capture_rng_state,
    rng_file_name,
)
from accelerate.checkpointing.run_identity import run_id
from accelerate.collectives.agreement import agree_on_failure, agree_on_outcome
from accelerate.storage.atomic import AtomicCheckpoint, read_manifest
from accelerate.storage.durable_io import FileRecord, SyncGroup, save_torch, write_all
from accelerate.storage.errors import CheckpointError, DiskFullError
from accelerate.storage.host_staging import HostStaging
from accelerate.storage.model_files import (
    prepare_state_dict,
    write_weights_file,
)

if TYPE_CHECKING:
    from accelerate.checkpointing.checkpoint_io import SaveParts

logger = logging.getLogger(__name__)

__all__ = ["check_checkpointable", "save_training_state"]

SAFE_MODEL_NAME = "model"
MODEL_NAME = "pytorch_model"
OPTIMIZER_NAME = "optimizer"
SCHEDULER_NAME = "scheduler"
DATALOADER_STATE_NAME = "dl_state_dict"
SCALER_NAME = "scaler.pt"


class ProcessInfo(Protocol):
    """What the checkpointing layer needs from ``PartialState``."""

    @property
    def num_processes(self) -> int: ...
    @property
    def process_index(self) -> int: ...
    @property
    def local_process_index(self) -> int: ...
    @property
    def is_main_process(self) -> bool: ...
    @property
    def is_local_main_process(self) -> bool: ...
    @property
    def use_distributed(self) -> bool: ...
    def wait_for_everyone(self) -> None: ...


def indexed_name(stem: str, index: int, extension: str) -> str:
    """``optimizer.bin`` for the first object, ``optimizer_1.bin`` for the second, ..."""
    return f"{stem}{'' if index == 0 else f'_{index}'}.{extension}"


def custom_name(index: int) -> str:
    return f"custom_checkpoint_{index}.pkl"


def model_names(index: int) -> tuple[str, str]:
    return indexed_name(SAFE_MODEL_NAME, index, "safetensors"), indexed_name(MODEL_NAME, index, "bin")


# --- saving -----------------------------------------------------------------------------------------
def _as_is(obj: Any) -> Any:
    return obj


def _write_shared(
    ckpt: AtomicCheckpoint,
    *,
    models_state_dicts: Sequence[Any],
    optimizers: Sequence[Any],
    schedulers: Sequence[Any],
    dataloaders: Sequence[Any],
    scaler: Any,
    custom_objects: Sequence[Any],
    safe_serialization: bool,
    sync: SyncGroup,
    parts: SaveParts | None = None,
    host_copy: Callable[[Any], Any] | None = None,
) -> dict[str, FileRecord]:
    to_host = host_copy if host_copy is not None else _as_is
    # The strategy's own parts (sharded models, their optimizers) are written by every process.
    skip_models = set(parts.models) if parts is not None else set()
    skip_optimizers = set(parts.optimizers) if parts is not None else set()
    # Every state is taken here, in the caller's thread and in this order (a state_dict() may not be
    # safe to call from another thread), and its CUDA tensors' copies to pinned host memory queued
    # in the same order; the files are then written at once, one writer each, every writer waiting
    # only for the copies of what it writes next.
    jobs: list[tuple[str, Callable[[], FileRecord]]] = []
    with HostStaging() as staging:

        def put(name: str, obj: Any) -> None:
            state = staging.stage(to_host(obj))

            def job() -> FileRecord:
                staging.wait_for(state)
                return save_torch(state, ckpt.path(name), sync=sync)

            jobs.append((name, job))

        for i, state_dict in enumerate(models_state_dicts):
            if i in skip_models:
                continue
            name = model_names(i)[0 if safe_serialization else 1]
            prepared = prepare_state_dict(
                staging.weights(to_host(state_dict)), safetensors=safe_serialization
            )
            jobs.append(
                (name, partial(write_weights_file, ckpt.path(name), prepared, sync=sync, ready=staging.ready))
            )
        for i, optimizer in enumerate(optimizers):
            if i in skip_optimizers:
                continue
            put(indexed_name(OPTIMIZER_NAME, i, "bin"), optimizer.state_dict())
        for i, scheduler in enumerate(schedulers):
            put(indexed_name(SCHEDULER_NAME, i, "bin"), scheduler.state_dict())
        for i, loader in enumerate(dataloaders):
            if callable(getattr(loader, "state_dict", None)):
                put(indexed_name(DATALOADER_STATE_NAME, i, "bin"), loader.state_dict())
        if scaler is not None:
            put(SCALER_NAME, scaler.state_dict())
        for i, obj in enumerate(custom_objects):
            put(custom_name(i), obj.state_dict())
        records = write_all([job for _, job in jobs])
    return {name: record for (name, _), record in zip(jobs, records, strict=True)}


def _estimate_bytes(objects: Sequence[Any]) -> int:
    """Bytes of tensor data in nested containers: about what the checkpoint files will take."""
    total = 0
    stack = list(objects)
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            total += item.numel() * item.element_size()
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _explain_disk_full(
    error: DiskFullError, ckpt: AtomicCheckpoint, models_state_dicts: Sequence[Any], optimizers: Sequence[Any]
) -> DiskFullError:
    """The disk-full error with what the checkpoint needs, what the old one holds and what is free."""
    needed = _estimate_bytes([*models_state_dicts, *(o.state_dict() for o in optimizers)])
    try:
        old = read_manifest(ckpt.target) if ckpt.in_place else None
    except CheckpointError:
        old = None
    old_size = sum(r.size for r in old.files.values()) if old is not None else 0
    try:
        # This attempt's partial files are removed next: count their space as free.
        staged = sum(p.stat().st_size for p in ckpt.staging.rglob("*") if p.is_file())
        free = f"{_mb(shutil.disk_usage(ckpt.staging.parent).free + staged)} free"
    except OSError:
        free = "free space unknown"
    both = (
        f"; the checkpoint it replaces ({_mb(old_size)}) stays until the new one is committed, so about "
        f"{_mb(needed + old_size)} in all"
        if old_size
        else ""
    )
    return DiskFullError(
        f"save_state to {ckpt.target}: {error} This checkpoint needs about {_mb(needed)}{both} ({free}).",
        path=error.path,
        code=error.code,
    )


def _stage(
    ckpt: AtomicCheckpoint, *, writer: bool, node: int, error: BaseException | None = None
) -> list[tuple[int, str | None, str]]:
    """Step 1: the writer recovers leftovers and creates the staging folder; every rank learns where.

    Returns every rank's ``(node, staging folder or None, token)``: the ranks with a staging folder
    are the writers, and the token (rank 0's) names this save uniquely (the background writer's keys
    in the store, see async_save.py). ``error``: this rank already failed (taking a snapshot).
    """
    staging = None
    if writer and error is None:
        try:
            staging = str(ckpt.prepare())
        except CheckpointError as exc:
            error = exc
        except OSError as exc:
            error = CheckpointError(f"cannot create a staging folder for {ckpt.target}: {exc}")
            error.__cause__ = exc
    try:
        paths: list[tuple[int, str | None, str]] = agree_on_failure(
            error,
            what=f"save_state to {ckpt.target}",
            payload=(node, staging, uuid.uuid4().hex),
            error_type=CheckpointError,
        )
    except BaseException:
        if staging is not None:
            ckpt.abort()
        raise
    if not writer:  # write into the staging folder of this node's writer
        ckpt.staging = Path(next(path for rank_node, path, _ in paths if rank_node == node and path))
    return paths


def write_rank_files(
    ckpt: AtomicCheckpoint,
    *,
    writer: bool,
    process_index: int,
    shared: dict[str, Any],
    rng_state: dict[str, Any],
    node: int = 0,
) -> dict[str, FileRecord]:
    """This rank's files (the writer's: the shared ones too), durable when it returns; their records."""
    records: dict[str, FileRecord] = {}
    sync = SyncGroup()  # each file is flushed while the next is serialised
    parts: SaveParts | None = shared.get("parts")
    try:
        # This rank's own files first: their fsyncs then run while the strategy's parts are written.
        local_error: Exception | None = None
        try:
            rng_name = rng_file_name(process_index)
            records[rng_name] = save_torch(rng_state, ckpt.path(rng_name), sync=sync)
            if writer:
                records.update(_write_shared(ckpt, sync=sync, **shared))
        except Exception as exc:  # raised after the collectives below, which every rank must join
            local_error = exc
        if parts is not None:
            try:
                records.update(parts.write(ckpt.staging, is_main_process=process_index == 0, sync=sync))
            except Exception:
                if local_error is None:
                    raise
        if local_error is not None:  # the first failure is the one to report (a full disk, say)
            raise local_error
    finally:
        sync.wait()  # this rank's files are durable before it reports success
    return records


def explain_failure(exc: Exception, ckpt: AtomicCheckpoint, shared: dict[str, Any]) -> Exception:
    """A full disk gets the sizes involved; other errors pass unchanged."""
    if isinstance(exc, DiskFullError):
        return _explain_disk_full(exc, ckpt, shared["models_state_dicts"], shared["optimizers"])
    return exc


def _write(
    ckpt: AtomicCheckpoint,
    *,
    state: ProcessInfo,
    writer: bool,
    node: int,
    step: int,
    shared: dict[str, Any],
    pending_gradients: Sequence[dict[str, torch.Tensor]] | None,
    owned_files: Callable[[Path, bool], dict[str, FileRecord]] | None = None,
) -> list[tuple[int, dict[str, FileRecord]]]:
    """Step 2: every rank writes its files (the writer the shared ones too) and reports its records."""
    records: dict[str, FileRecord] = {}
    error: BaseException | None = None
    try:
        rng_state = capture_rng_state(step, shared["dataloaders"], pending_gradients)
        records = write_rank_files(
            ckpt,
            writer=writer,
            process_index=state.process_index,
            shared=shared,
            rng_state=rng_state,
            node=node,
        )
        if owned_files is not None:  # a backend that checkpoints its objects itself (CheckpointIO.save_owned)
            records.update(owned_files(ckpt.staging, writer))
    except Exception as exc:  # told to every rank below, then raised everywhere
        error = explain_failure(exc, ckpt, shared)
    try:
        return agree_on_failure(
            error,
            what=f"save_state to {ckpt.target}",
            payload=(node, records),
            error_type=CheckpointError,
            note="nothing was committed",
        )
    except BaseException:
        if writer:
            ckpt.abort()
        raise


def _commit(
    ckpt: AtomicCheckpoint,
    gathered: list[tuple[int, dict[str, FileRecord]]],
    *,
    writer: bool,
    node: int,
    step: int,
    world_size: int,
    extra: dict[str, Any],
) -> None:
    """Step 3: the writer adds its node's records, writes the manifest and publishes the folder."""
    error: BaseException | None = None
    if writer:
        for rank_node, rank_records in gathered:
            if rank_node == node:
                ckpt.update(rank_records)
        try:
            ckpt.commit(step=step, world_size=world_size, extra=extra)
        except Exception as exc:
            error = exc
            ckpt.abort()
    # A last exchange: when it returns on any rank, the commit happened on every writer.
    agree_on_outcome(error, what=f"Committing {ckpt.target}", error_type=CheckpointError)


def save_training_state(
    output_dir: str | os.PathLike[str],
    *,
    state: ProcessInfo,
    models_state_dicts: Sequence[Any] = (),
    optimizers: Sequence[Any] = (),
    schedulers: Sequence[Any] = (),
    dataloaders: Sequence[Any] = (),
    scaler: Any = None,
    custom_objects: Sequence[Any] = (),
    step: int = 0,
    safe_serialization: bool = True,
    save_on_each_node: bool = False,
    pending_gradients: Sequence[dict[str, torch.Tensor]] | None = None,
    parts: SaveParts | None = None,
    owned_files: Callable[[Path, bool], dict[str, FileRecord]] | None = None,
    extra_manifest: dict[str, Any] | None = None,
    host_copy: Callable[[Any], Any] | None = None,
) -> Path:
    """Writes a complete, crash-safe checkpoint to ``output_dir``; call it on every process.

    Args:
        output_dir: the checkpoint folder (created; an existing checkpoint there is replaced, other
            files in it are left alone). While an existing checkpoint is replaced the disk holds both.
        state: the process's ``PartialState``.
        models_state_dicts: one full state dict per model (already gathered/unwrapped by the caller;
            only the main process's are written).
        optimizers, schedulers, custom_objects: objects with ``state_dict()``; called on the writing
            process only, so they must not be collectives.
        dataloaders: loaders with ``state_dict()`` are saved as ``dl_state_dict*.bin``; for others the
            sampler's ``torch.Generator`` (if any) goes into each process's random-states file.
        scaler: a ``torch.amp.GradScaler`` or None.
        step: the training step counter, kept in the manifest and the random-states files.
        safe_serialization: models as safetensors (default) or ``pytorch_model*.bin``.
        save_on_each_node: every node's local main process writes its own copy (node-local disks).
        pending_gradients: this process's accumulated gradients of an unfinished accumulation
            window, one ``{parameter name: gradient}`` per model (None when there is none); restored
            by ``load_training_state`` so a run saved mid-window resumes exactly.
        parts: the models and optimizers the strategy writes itself on every process
            (``CheckpointIO.plan_save``; sharded models), instead of from ``models_state_dicts`` /
            ``optimizers``.
        owned_files: ``(staging folder, is_writer) -> records``, called on every rank after its own
            files: a backend that checkpoints its objects itself (``CheckpointIO.save_owned``) writes
            there; the writer returns every record.
        extra_manifest: more entries for the manifest's ``extra`` (read back by that backend).
        host_copy: applied to every state the writer writes (``CheckpointIO.host_copy``: device
            tensors a file cannot carry copied to the host); None: written as they are.

    Returns:
        The committed folder. When this returns on any rank, the checkpoint is committed everywhere.

    Raises:
        CheckpointError: on every rank if any rank failed (the message names the rank and its
            error; in a single process the original exception propagates); nothing is committed
            then and the previous checkpoint at ``output_dir`` is untouched. A full disk raises ``DiskFullError`` (a ``CheckpointError``) naming the file
            and the space the checkpoint needs.
    """
    ckpt = AtomicCheckpoint(output_dir)
    writer, node = writer_and_node(state, save_on_each_node)
    # A node the parts cannot be saved on: agreed on in the first exchange, so every rank raises.
    refused = parts.node_error(node) if parts is not None else None
    _stage(ckpt, writer=writer, node=node, error=refused)
    shared = {
        "models_state_dicts": models_state_dicts,
        "optimizers": optimizers,
        "schedulers": schedulers,
        "dataloaders": dataloaders,
        "scaler": scaler,
        "custom_objects": custom_objects,
        "safe_serialization": safe_serialization,
        "parts": parts,
        "host_copy": host_copy,
    }
    gathered = _write(
        ckpt,
        state=state,
        writer=writer,
        node=node,
        step=step,
        shared=shared,
        pending_gradients=pending_gradients,
        owned_files=owned_files,
    )
    extra = {**(extra_manifest or {}), **manifest_extra(shared)}
    _commit(ckpt, gathered, writer=writer, node=node, step=step, world_size=state.num_processes, extra=extra)
    return ckpt.target


def writer_and_node(state: ProcessInfo, save_on_each_node: bool) -> tuple[bool, int]:
    """Whether this rank writes the shared files, and the node whose copy it belongs to."""
    if save_on_each_node:
        return state.is_local_main_process, state.process_index - state.local_process_index
    return state.is_main_process, 0


def manifest_extra(shared: dict[str, Any]) -> dict[str, Any]:
    """What the manifest records about the saved objects (counted by ``load_training_state``)."""
    extra: dict[str, Any] = {
        "num_models": len(shared["models_state_dicts"]),
        "num_optimizers": len(shared["optimizers"]),
        "num_schedulers": len(shared["schedulers"]),
        "num_dataloaders": len(shared["dataloaders"]),
        "num_custom_objects": len(shared["custom_objects"]),
        "has_scaler": shared["scaler"] is not None,
        "safe_serialization": shared["safe_serialization"],
        "run_id": run_id(),  # which job wrote it: load_state names it when another job resumes it
    }
    if shared.get("parts") is not None:
        extra.update(shared["parts"].manifest_extra())
    return extra
