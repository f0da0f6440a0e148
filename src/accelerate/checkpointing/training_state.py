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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from accelerate.checkpointing.atomic import (
    MANIFEST_NAME,
    AtomicCheckpoint,
    FileRecord,
    Manifest,
    SyncGroup,
    checkpoint_file,
    checkpoint_folder,
    load_verified,
    read_manifest,
    save_torch,
)
from accelerate.checkpointing.errors import CheckpointError, DiskFullError
from accelerate.checkpointing.model_files import (
    _torch_load,
    load_state_dict_file,
    prepare_state_dict,
    write_weights_file,
)
from accelerate.checkpointing.model_loading import fill_tied_keys
from accelerate.checkpointing.objects import check_checkpointable
from accelerate.checkpointing.project import looks_like_checkpoint, own_traces
from accelerate.checkpointing.rng import (
    PENDING_GRADIENTS,
    capture_rng_state,
    load_rng_file,
    restore_rng_state,
    rng_file_name,
)
from accelerate.utils.agreement import agree_on_failure

logger = logging.getLogger(__name__)

__all__ = ["check_checkpointable", "load_training_state", "save_training_state"]

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
) -> dict[str, FileRecord]:
    records: dict[str, FileRecord] = {}

    def put(name: str, obj: Any) -> None:
        records[name] = save_torch(obj, ckpt.path(name), sync=sync)

    for i, state_dict in enumerate(models_state_dicts):
        name = model_names(i)[0 if safe_serialization else 1]
        prepared = prepare_state_dict(state_dict, safetensors=safe_serialization)
        records[name] = write_weights_file(ckpt.path(name), prepared, sync=sync)
    for i, optimizer in enumerate(optimizers):
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
    return records


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
        free = f"{_mb(shutil.disk_usage(ckpt.staging.parent).free)} free now"
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


def _stage(ckpt: AtomicCheckpoint, *, writer: bool, node: int) -> None:
    """Step 1: the writer recovers leftovers and creates the staging folder; every rank learns where."""
    error: BaseException | None = None
    staging = None
    if writer:
        try:
            staging = str(ckpt.prepare())
        except CheckpointError as exc:
            error = exc
        except OSError as exc:
            error = CheckpointError(f"cannot create a staging folder for {ckpt.target}: {exc}")
            error.__cause__ = exc
    paths = agree_on_failure(
        error, what=f"save_state to {ckpt.target}", payload=(node, staging), error_type=CheckpointError
    )
    if not writer:  # write into the staging folder of this node's writer
        ckpt.staging = Path(next(path for rank_node, path in paths if rank_node == node and path))


def _write(
    ckpt: AtomicCheckpoint,
    *,
    state: ProcessInfo,
    writer: bool,
    node: int,
    step: int,
    shared: dict[str, Any],
    pending_gradients: Sequence[dict[str, torch.Tensor]] | None,
) -> list[tuple[int, dict[str, FileRecord]]]:
    """Step 2: every rank writes its files (the writer the shared ones too) and reports its records."""
    records: dict[str, FileRecord] = {}
    error: BaseException | None = None
    sync = SyncGroup()  # each file is flushed while the next is serialised
    try:
        if writer:
            records.update(_write_shared(ckpt, sync=sync, **shared))
        rng_name = rng_file_name(state.process_index)
        dataloaders = shared["dataloaders"]
        rng_state = capture_rng_state(step, dataloaders, pending_gradients)
        records[rng_name] = save_torch(rng_state, ckpt.path(rng_name), sync=sync)
        sync.wait()  # this rank's files are durable before it reports success
    except DiskFullError as exc:
        error = _explain_disk_full(exc, ckpt, shared["models_state_dicts"], shared["optimizers"])
    except Exception as exc:  # told to every rank below, then raised everywhere
        error = exc
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
    # A second exchange: when it returns on any rank, the commit happened on every writer.
    agree_on_failure(error, what=f"Committing {ckpt.target}", error_type=CheckpointError)


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

    Returns:
        The committed folder. When this returns on any rank, the checkpoint is committed everywhere.

    Raises:
        CheckpointError: on every rank if any rank failed (the message names the rank and its
            error; in a single process the original exception propagates); nothing is committed
            then and the previous checkpoint at ``output_dir`` is untouched. A full disk raises ``DiskFullError`` (a ``CheckpointError``) naming the file
            and the space the checkpoint needs.
    """
    ckpt = AtomicCheckpoint(output_dir)
    writer = state.is_local_main_process if save_on_each_node else state.is_main_process
    node = state.process_index - state.local_process_index if save_on_each_node else 0
    _stage(ckpt, writer=writer, node=node)
    shared = {
        "models_state_dicts": models_state_dicts,
        "optimizers": optimizers,
        "schedulers": schedulers,
        "dataloaders": dataloaders,
        "scaler": scaler,
        "custom_objects": custom_objects,
        "safe_serialization": safe_serialization,
    }
    gathered = _write(
        ckpt,
        state=state,
        writer=writer,
        node=node,
        step=step,
        shared=shared,
        pending_gradients=pending_gradients,
    )
    extra = {
        "num_models": len(models_state_dicts),
        "num_optimizers": len(optimizers),
        "num_schedulers": len(schedulers),
        "num_dataloaders": len(dataloaders),
        "num_custom_objects": len(custom_objects),
        "has_scaler": scaler is not None,
        "safe_serialization": safe_serialization,
    }
    _commit(ckpt, gathered, writer=writer, node=node, step=step, world_size=state.num_processes, extra=extra)
    return ckpt.target


# --- loading ----------------------------------------------------------------------------------------
_CONTENTS = (
    f"{MANIFEST_NAME}, model.safetensors or pytorch_model.bin, optimizer.bin, scheduler.bin, "
    "dl_state_dict.bin, scaler.pt, custom_checkpoint_0.pkl, random_states_0.pkl"
)


def _open_folder(input_dir: str | os.PathLike[str]) -> Path:
    """The folder to read for ``input_dir``, or a clear error when there is none."""
    directory = Path(input_dir)
    if str(input_dir) == "":
        raise CheckpointError("load_state got an empty string; pass the folder save_state wrote")
    if directory.is_file():
        raise CheckpointError(
            f"{directory} is a file, not a checkpoint folder; pass the folder that save_state wrote "
            "(for a single weights file use load_checkpoint_in_model)"
        )
    folder = checkpoint_folder(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"Checkpoint folder {directory} does not exist")
    if folder != directory:
        logger.warning(
            "Checkpoint %s is missing but the complete previous checkpoint is at %s (a save replacing it "
            "was interrupted); loading that one",
            directory,
            folder,
        )
    return folder


class _Reader:
    """Finds files in a checkpoint folder and verifies them against its manifest (when it has one)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.manifest: Manifest | None = read_manifest(directory)
        if self.manifest is None:
            self._check_unverified()

    def _check_unverified(self) -> None:
        if not looks_like_checkpoint(self.directory):
            raise CheckpointError(
                f"No checkpoint in {self.directory}: it holds none of the files save_state writes "
                f"({_CONTENTS}). Pass the folder that save_state wrote."
            )
        traces = own_traces(self.directory)
        if traces is not None:
            raise CheckpointError(
                f"Checkpoint {self.directory} has no {MANIFEST_NAME} although {traces}: its save did not "
                "complete or the manifest was removed, so its files cannot be trusted. Load an earlier "
                "checkpoint."
            )
        logger.warning(
            "Loading checkpoint %s unverified: it has no %s (saved by upstream Accelerate or another "
            "tool), so a truncated or corrupted file cannot be detected",
            self.directory,
            MANIFEST_NAME,
        )

    def path(self, name: str) -> Path:
        return checkpoint_file(self.directory, name)

    def has(self, name: str) -> bool:
        if self.manifest is not None:
            return name in self.manifest.files
        return (self.directory / name).is_file()

    def record(self, name: str) -> FileRecord | None:
        return self.manifest.files.get(name) if self.manifest is not None else None

    def require(self, name: str, what: str) -> Path:
        if not self.has(name):
            raise CheckpointError(f"Checkpoint {self.directory} has no {name} for {what}")
        return self.path(name)

    def torch_file(self, name: str, what: str) -> Any:
        path = self.require(name, what)
        record = self.record(name)
        if record is None and not path.is_file():
            raise CheckpointError(f"Checkpoint file {path} is missing")
        return load_verified(path, record, _torch_load)


def _load_models(reader: _Reader, models: Sequence[nn.Module], strict: bool) -> None:
    for i, model in enumerate(models):
        names = [n for n in model_names(i) if reader.has(n)]
        if not names:
            raise CheckpointError(
                f"Checkpoint {reader.directory} has no weights for model {i} (looked for {' or '.join(model_names(i))}); "
                "was it saved with fewer models?"
            )
        state_dict = load_state_dict_file(reader.path(names[0]), reader.record(names[0]))
        fill_tied_keys(model, state_dict)
        try:
            model.load_state_dict(state_dict, strict=strict)
        except RuntimeError as exc:
            raise CheckpointError(
                f"Loading {names[0]} into model {i} ({type(model).__name__}): {exc}"
            ) from exc


def _load_optional(reader: _Reader, name: str, obj: Any, what: str, strict: bool) -> None:
    if reader.has(name):
        obj.load_state_dict(reader.torch_file(name, what))
    elif strict and reader.manifest is not None:
        # Only our own checkpoints always carry these files; upstream writes a loader's state only
        # for stateful loaders (not its default), so a folder it saved must load without them.
        raise CheckpointError(
            f"Checkpoint {reader.directory} has no {name} for {what} (pass strict=False to skip it)"
        )
    else:
        logger.warning("Checkpoint %s has no %s; %s keeps its current state", reader.directory, name, what)


def _restore_pending_gradients(
    pending: Any, models: Sequence[nn.Module], reader: _Reader, state: ProcessInfo, directory: Path
) -> None:
    """Puts back the gradients of an unfinished accumulation window (see ``save_training_state``)."""
    if not pending:
        return
    saved_world = reader.manifest.world_size if reader.manifest is not None else None
    if saved_world is not None and saved_world != state.num_processes:
        logger.warning(
            "Checkpoint %s was saved in the middle of a gradient accumulation window by %d processes; "
            "their local gradients cannot be split over %d, so the window restarts without them",
            directory,
            saved_world,
            state.num_processes,
        )
        return
    if len(pending) != len(models):
        raise CheckpointError(
            f"Checkpoint {directory} holds accumulated gradients of {len(pending)} models, but "
            f"{len(models)} are prepared; prepare the same models as when saving."
        )
    with torch.no_grad():
        for index, (grads, model) in enumerate(zip(pending, models, strict=True)):
            params = dict(model.named_parameters())
            unknown = sorted(set(grads) - set(params))
            if unknown:
                raise CheckpointError(
                    f"Checkpoint {directory}: accumulated gradients of model {index} name parameters the "
                    f"model lacks: {unknown[:5]}"
                )
            for name, grad in grads.items():
                param = params[name]
                param.grad = grad.to(device=param.device, dtype=param.dtype)


def load_training_state(
    input_dir: str | os.PathLike[str],
    *,
    state: ProcessInfo,
    models: Sequence[nn.Module] = (),
    optimizers: Sequence[Any] = (),
    schedulers: Sequence[Any] = (),
    dataloaders: Sequence[Any] = (),
    scaler: Any = None,
    custom_objects: Sequence[Any] = (),
    strict: bool = True,
) -> dict[str, Any]:
    """Restores everything :func:`save_training_state` wrote; call it on every process.

    Works on folders saved by upstream Accelerate too (no manifest: loaded without checksum checks).

    Args:
        strict: passed to each model's ``load_state_dict``; also, a dataloader or scaler given here
            whose state is absent from the checkpoint raises instead of logging a warning.

    Returns:
        ``{"step": int, "verified": bool, "world_size": int | None}``; ``verified`` says whether
        checksums were checked (False for folders without our manifest).

    Raises:
        CheckpointError: naming the missing, truncated or corrupted file.
    """
    directory = _open_folder(input_dir)
    reader = _Reader(directory)
    # Optimizer files (usually the largest) are read on a thread while the models load: both reads
    # release the GIL, so on a machine with a spare core the two overlap.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelerate-load") as pool:
        pending = [
            pool.submit(reader.torch_file, indexed_name(OPTIMIZER_NAME, i, "bin"), f"optimizer {i}")
            for i in range(len(optimizers))
        ]
        _load_models(reader, models, strict)
        for optimizer, state_future in zip(optimizers, pending, strict=True):
            optimizer.load_state_dict(state_future.result())
    for i, scheduler in enumerate(schedulers):
        name = indexed_name(SCHEDULER_NAME, i, "bin")
        scheduler.load_state_dict(reader.torch_file(name, f"scheduler {i}"))
    for i, loader in enumerate(dataloaders):
        if callable(getattr(loader, "load_state_dict", None)):
            _load_optional(
                reader, indexed_name(DATALOADER_STATE_NAME, i, "bin"), loader, f"dataloader {i}", strict
            )
    if scaler is not None:
        _load_optional(reader, SCALER_NAME, scaler, "the GradScaler", strict)
    for i, obj in enumerate(custom_objects):
        obj.load_state_dict(
            reader.torch_file(custom_name(i), f"registered object {i} ({type(obj).__name__})")
        )
    step = reader.manifest.step if reader.manifest is not None else None
    rng_name = rng_file_name(state.process_index)
    if reader.has(rng_name):
        rng_state = load_verified(reader.path(rng_name), reader.record(rng_name), load_rng_file)
        restore_rng_state(rng_state, dataloaders)
        _restore_pending_gradients(rng_state.get(PENDING_GRADIENTS), models, reader, state, directory)
        saved_step = rng_state.get("step")
        if step is None:
            step = int(saved_step or 0)
        elif saved_step is not None and int(saved_step) != step:
            # The random-states file is checksummed; the manifest's step alone could have been edited.
            raise CheckpointError(
                f"Checkpoint {directory}: {MANIFEST_NAME} says step {step} but the verified {rng_name} "
                f"says {int(saved_step)}; the manifest was edited. Load an earlier checkpoint."
            )
    else:
        saved = reader.manifest.world_size if reader.manifest is not None else "an unknown number of"
        logger.warning(
            "Checkpoint %s has no %s (saved by %s processes, loading on %d); this process's random "
            "generators are not restored",
            directory,
            rng_name,
            saved,
            state.num_processes,
        )
    return {
        "step": int(step or 0),
        "verified": reader.manifest is not None,
        "world_size": reader.manifest.world_size if reader.manifest is not None else None,
    }
