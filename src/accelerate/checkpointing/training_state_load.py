"""Loading what ``save_training_state`` wrote: verified, in any world size, upstream folders too.

Every file named in the manifest is checked (size and checksum) as it is read; a folder without our
manifest is loaded unverified with one warning (upstream's folders), or refused when it carries our
own traces (then its manifest was lost). Models load while the optimizer files are read on a thread.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accelerate.checkpointing.atomic import (
    MANIFEST_NAME,
    FileRecord,
    Manifest,
    checkpoint_file,
    checkpoint_folder,
    load_verified,
    read_manifest,
)
from accelerate.checkpointing.checkpoint_io import CheckpointIO
from accelerate.checkpointing.errors import CheckpointError
from accelerate.checkpointing.model_files import (
    _torch_load,
    load_state_dict_file,
)
from accelerate.checkpointing.model_loading import fill_tied_keys
from accelerate.checkpointing.project import looks_like_checkpoint, own_traces
from accelerate.checkpointing.rng import (
    PENDING_GRADIENTS,
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

logger = logging.getLogger(__name__)

__all__ = ["load_training_state"]


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
        elif not self.manifest.signed:
            logger.warning(
                "Checkpoint %s has a manifest from an older accelerate (without its own checksum): its files "
                "are verified against it and loaded, but a save into this folder will not delete any file it "
                "lists (save to a new folder to get a fully trusted checkpoint)",
                directory,
            )

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

    def torch_file(self, name: str, what: str, apply: Callable[[Path, Any], Any] | None = None) -> Any:
        """The file's ``torch.load``, verified (while ``apply`` runs on it, if given; see below).

        With ``apply`` the file is memory-mapped (its tensors view the page cache) and
        ``apply(path, loaded)`` runs while the checksum is computed on another thread; its result is
        returned once the file is verified. A damaged file still raises, but after ``apply`` has
        used its contents: as with any failed ``load_state``, load an earlier checkpoint then.
        """
        path = self.require(name, what)
        record = self.record(name)
        if record is None and not path.is_file():
            raise CheckpointError(f"Checkpoint file {path} is missing")
        if apply is None:
            return load_verified(path, record, _torch_load)
        return load_verified(path, record, lambda p: apply(p, _torch_load(p, mmap=True)))


def _live_state(optimizer: Any) -> dict[int, Any]:
    """The optimizer's current per-parameter state by ``state_dict()`` index, read without ``state_dict()``."""
    state, groups = getattr(optimizer, "state", None), getattr(optimizer, "param_groups", None)
    if not isinstance(state, Mapping) or not isinstance(groups, list):
        return {}
    params = [param for group in groups for param in group.get("params", ())]
    return {index: state[param] for index, param in enumerate(params) if param in state}


class _FileRanges:
    """Where each tensor of a ``torch.load(mmap=True)`` result lies in its file, to read it directly.

    With ``mmap=True`` torch maps the whole file once and every storage views its record there, so a
    storage's address minus the mapping's start is its record's offset in the file. Reading those
    bytes with ``pread`` into a tensor the optimizer already holds skips the page faults of touching
    the mapping. Anything that does not line up is copied from the mapping instead.
    """

    def __init__(self, path: Path, tensors: list[torch.Tensor]) -> None:
        self.base: int | None = None
        self.size = path.stat().st_size
        try:
            reader: Any = torch._C.PyTorchFileReader(str(path))
            offsets = [reader.get_record_offset(r) for r in reader.get_all_records() if r.startswith("data/")]
        except (RuntimeError, AttributeError):
            return
        pointers = [t.untyped_storage().data_ptr() for t in tensors if t.numel()]
        if offsets and pointers:
            self.base = min(pointers) - min(offsets)

    def read_into(self, handle: Any, target: torch.Tensor, value: torch.Tensor) -> bool:
        """Reads ``value``'s bytes from the file into ``target``; False when it cannot."""
        nbytes = int(value.numel()) * value.element_size()
        if (
            self.base is None
            or target.device.type != "cpu"
            or not (target.is_contiguous() and value.is_contiguous())
            or nbytes == 0
        ):
            return False
        start = int(value.storage_offset()) * value.element_size()
        offset = value.untyped_storage().data_ptr() - self.base + start
        if offset < 0 or offset + nbytes > self.size:
            return False
        view = memoryview((ctypes.c_char * nbytes).from_address(target.data_ptr())).cast("B")
        done = 0
        while done < nbytes:
            got = os.preadv(handle.fileno(), [view[done:]], offset + done)
            if got <= 0:
                return False
            done += got
        return True


def _fill_optimizer_state(live_state: dict[int, Any], path: Path, loaded: Any) -> Any:
    """``loaded`` (whose tensors view the file's pages) with every tensor in memory of its own.

    Each saved tensor is copied into the tensor the optimizer already holds for it, when it has one
    of the same shape and dtype (a resumed run's optimizer has stepped before): memory that is
    already mapped takes the copy at memory speed, where ``torch.load`` would fault in fresh pages
    for all of it, which costs more than reading the file. Any other tensor gets its own copy, so
    nothing stays tied to the checkpoint file. ``load_state_dict`` then finds the same tensors.
    """
    saved_state = loaded.get("state", {}) if isinstance(loaded, dict) else {}
    tensors = [v for entry in saved_state.values() for v in entry.values() if isinstance(v, torch.Tensor)]
    ranges = _FileRanges(path, tensors)
    with torch.no_grad(), open(path, "rb", buffering=0) as handle:
        for index, entry in saved_state.items():
            live = live_state.get(index)
            for key, value in list(entry.items()):
                if not isinstance(value, torch.Tensor):
                    continue
                target = live.get(key) if isinstance(live, dict) else None
                if (
                    type(target)
                    is torch.Tensor  # not a DTensor (sharded state): load_state_dict places those
                    and target.shape == value.shape
                    and target.dtype == value.dtype
                    and target.layout == value.layout == torch.strided
                ):
                    if not ranges.read_into(handle, target, value):
                        target.copy_(value)
                    entry[key] = target
                else:
                    entry[key] = value.clone()
    return loaded


def _load_models(
    reader: _Reader, models: Sequence[nn.Module], strict: bool, state: ProcessInfo, io: CheckpointIO
) -> None:
    for i, model in enumerate(models):
        # A layout of the strategy's own (a sharded model's folder, say) first, then the plain files.
        if io.load_model(
            reader, i, model, strict=strict, rank=state.process_index, world_size=state.num_processes
        ):
            continue
        names = [n for n in model_names(i) if reader.has(n)]
        if not names:
            raise CheckpointError(
                f"Checkpoint {reader.directory} has no weights for model {i} (looked for {' or '.join(model_names(i))}); "
                "was it saved with fewer models?"
            )
        state_dict = load_state_dict_file(reader.path(names[0]), reader.record(names[0]))
        fill_tied_keys(model, state_dict)
        if io.load_full_model(model, state_dict, strict=strict):  # saved plain, held otherwise (sharded)
            continue
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
    io: CheckpointIO | None = None,
) -> dict[str, Any]:
    """Restores everything :func:`save_training_state` wrote; call it on every process.

    Works on folders saved by upstream Accelerate too (no manifest: loaded without checksum checks).

    Args:
        strict: passed to each model's ``load_state_dict``; also, a dataloader or scaler given here
            whose state is absent from the checkpoint raises instead of logging a warning.
        io: the strategy's checkpoint I/O (``Strategy.checkpoint_io()``); None: plain files.

    Returns:
        ``{"step": int, "verified": bool, "world_size": int | None}``; ``verified`` says whether
        checksums were checked (False for folders without our manifest).

    Raises:
        CheckpointError: naming the missing, truncated or corrupted file.
    """
    directory = _open_folder(input_dir)
    reader = _Reader(directory)
    io = io if io is not None else CheckpointIO()
    # Optimizer files (usually the largest) are read, verified and copied on a thread while the
    # models load: both release the GIL, so on a machine with a spare core the two overlap. The
    # thread only moves bytes; the optimizers themselves are touched here, on the caller's thread.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelerate-load") as pool:
        pending = [
            None
            if io.has_optimizer(reader, i)
            else pool.submit(
                reader.torch_file,
                indexed_name(OPTIMIZER_NAME, i, "bin"),
                f"optimizer {i}",
                functools.partial(_fill_optimizer_state, _live_state(optimizer)),
            )
            for i, optimizer in enumerate(optimizers)
        ]
        _load_models(reader, models, strict, state, io)
        for i, (optimizer, state_future) in enumerate(zip(optimizers, pending, strict=True)):
            if state_future is None:
                io.load_optimizer(
                    reader, i, optimizer, models, rank=state.process_index, world_size=state.num_processes
                )
            elif not io.load_full_optimizer(optimizer, models, state_future.result()):
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
