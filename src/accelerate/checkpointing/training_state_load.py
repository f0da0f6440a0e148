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

import ctypes
import functools
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accelerate.checkpointing import fsdp_state
from accelerate.checkpointing.atomic import (
    MANIFEST_NAME,
    FileRecord,
    Manifest,
    checkpoint_file,
    checkpoint_folder,
    load_verified,
    read_manifest,
)
from accelerate.checkpointing.durable_io import open_regular
from accelerate.checkpointing.errors import CheckpointError
from accelerate.checkpointing.fsdp import (
    is_sharded_model,
    load_full_state_dict,
    model_file_name,
    model_folder_name,
    optimizer_owner,
)
from accelerate.checkpointing.fsdp_dcp import METADATA_NAME
from accelerate.checkpointing.model_files import (
    _torch_load,
    load_state_dict_file,
)
from accelerate.checkpointing.project import looks_like_checkpoint, own_traces
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
from accelerate.utils.agreement import agree_on_failure

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
        # Anything but a folder counts: reading a FIFO or a device there is refused, naming it.
        entry = self.directory / name
        return entry.exists() and not entry.is_dir()

    def record(self, name: str) -> FileRecord | None:
        return self.manifest.files.get(name) if self.manifest is not None else None

    def require(self, name: str, what: str) -> Path:
        if not self.has(name):
            raise CheckpointError(f"Checkpoint {self.directory} has no {name} for {what}")
        return self.path(name)

    def torch_file(self, name: str, what: str, *, mmap: bool = False) -> Any:
        """The file's ``torch.load``, verified; with ``mmap`` its tensors view the file's pages."""
        path = self.require(name, what)
        record = self.record(name)
        if mmap:
            return load_verified(path, record, lambda p: _torch_load(p, mmap=True))
        return load_verified(path, record, _torch_load)


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
    with torch.no_grad(), open_regular(path) as handle:
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


def fill_tied_keys(model: nn.Module, state_dict: dict[str, Any]) -> None:
    """Adds the other names of tied parameters that a checkpoint stored under one name only.

    Files written by other tools (and upstream Accelerate's safetensors files) drop duplicate names
    of shared weights; this lets ``load_state_dict(strict=True)`` accept them.
    """
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    for names in groups.values():
        present = next((n for n in names if n in state_dict), None)
        if present is not None:
            for name in names:
                state_dict.setdefault(name, state_dict[present])


_Apply = Callable[[], None]


class _Plan:
    """What the load will do, built while everything is read and checked; nothing is applied yet.

    Applied in this order: ``sharded`` (the FSDP parts: collectives, so before anything that could
    fail on one process alone; the DCP layouts still verify their files inside them), ``own_code``
    (the registered objects' and loaders' own ``load_state_dict``, which no check can foresee),
    then ``checked`` and the optimizer files, which were fully checked beforehand.
    """

    def __init__(self) -> None:
        self.sharded: list[_Apply] = []
        self.own_code: list[_Apply] = []
        self.checked: list[_Apply] = []
        # (optimizer, path, loaded) of plain optimizer files: copied into the optimizer on a thread.
        self.optimizer_files: list[tuple[Any, Path, Any]] = []
        self.step: int | None = None


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


def _fsdp_model_layout(reader: _Reader, index: int) -> bool:
    """True when model ``index`` was saved in an FSDP layout (a DCP folder or a gathered file)."""
    return reader.has(f"{model_folder_name(index)}/{METADATA_NAME}") or reader.has(model_file_name(index))


def _plan_models(
    reader: _Reader, models: Sequence[nn.Module], strict: bool, state: ProcessInfo, plan: _Plan
) -> None:
    for i, model in enumerate(models):
        if _fsdp_model_layout(reader, i):
            # Read inside their own collectives, so loaded (first) once every process agreed.
            plan.sharded.append(_fsdp_model_loader(reader, i, model, strict, state))
            continue
        names = [n for n in model_names(i) if reader.has(n)]
        if not names:
            raise CheckpointError(
                f"Checkpoint {reader.directory} has no weights for model {i} (looked for {' or '.join(model_names(i))}); "
                "was it saved with fewer models?"
            )
        state_dict = load_state_dict_file(reader.path(names[0]), reader.record(names[0]))
        fill_tied_keys(model, state_dict)
        if is_sharded_model(model):  # saved unsharded, loaded sharded
            plan.sharded.append(functools.partial(load_full_state_dict, model, state_dict, strict=strict))
            continue
        problems = _model_problems(model, state_dict, strict)
        if problems:
            raise CheckpointError(
                f"Loading {names[0]} into model {i} ({type(model).__name__}) with strict={strict}: "
                f"{'; '.join(problems)}. Nothing was loaded."
            )
        plan.checked.append(functools.partial(_load_model_state, model, state_dict, strict, names[0], i))


def _fsdp_model_loader(
    reader: _Reader, index: int, model: nn.Module, strict: bool, state: ProcessInfo
) -> _Apply:
    def load() -> None:
        fsdp_state.load_model(
            reader, index, model, strict=strict, rank=state.process_index, world_size=state.num_processes
        )

    return load


def _load_model_state(model: nn.Module, state_dict: Any, strict: bool, name: str, index: int) -> None:
    try:
        model.load_state_dict(state_dict, strict=strict)
    except RuntimeError as exc:
        raise CheckpointError(f"Loading {name} into model {index} ({type(model).__name__}): {exc}") from exc


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
            plan.sharded.append(_fsdp_optimizer_loader(reader, i, optimizer, models, state))
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
        if _steps_a_sharded_model(optimizer, models):
            plan.sharded.append(
                functools.partial(_load_sharded_optimizer, optimizer, models, reader.path(name), loaded)
            )
        else:
            plan.optimizer_files.append((optimizer, reader.path(name), loaded))


def _fsdp_optimizer_loader(
    reader: _Reader, index: int, optimizer: Any, models: Sequence[nn.Module], state: ProcessInfo
) -> _Apply:
    def load() -> None:
        fsdp_state.load_optimizer(
            reader, index, optimizer, models, rank=state.process_index, world_size=state.num_processes
        )

    return load


def _steps_a_sharded_model(optimizer: Any, models: Sequence[nn.Module]) -> bool:
    owner = optimizer_owner(optimizer, models)
    return owner is not None and is_sharded_model(models[owner])


def _load_sharded_optimizer(optimizer: Any, models: Sequence[nn.Module], path: Path, loaded: Any) -> None:
    fsdp_state.load_full_optimizer(
        optimizer, models, _fill_optimizer_state(_live_state(optimizer), path, loaded)
    )


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
        saved = reader.manifest.world_size if reader.manifest is not None else "an unknown number of"
        logger.warning(
            "Checkpoint %s has no %s (saved by %s processes, loading on %d); this process's random "
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
) -> _Plan:
    """Reads and checks everything the load needs, in the order it is applied; changes nothing."""
    plan = _Plan()
    if custom_objects is not None:
        _check_custom_count(reader, custom_objects)
    # Optimizer files (usually the largest) are read and verified on a thread while the models are
    # read: both release the GIL, so on a machine with a spare core the two overlap.
    pending = [
        None
        if fsdp_state.has_optimizer_folder(reader, i)
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
        if not fsdp_state.load_full_optimizer(optimizer, models, loaded):  # keyed by names: by name
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
