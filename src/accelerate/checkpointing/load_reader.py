"""Reading a checkpoint folder for ``load_state``: which files it holds and where, verified.

:class:`_Reader` finds each file (a pending commit's staging area included) and checks it against
the manifest as it is read; a folder without our manifest is read unverified with one warning
(upstream's folders), or refused when it carries our own traces. The optimizer helpers read an
optimizer file's tensors straight into the live optimizer's memory where shapes allow.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accelerate.checkpointing.project import looks_like_checkpoint, own_traces
from accelerate.storage.atomic import checkpoint_file, checkpoint_folder, read_manifest
from accelerate.storage.durable_io import MANIFEST_NAME, FileRecord
from accelerate.storage.errors import CheckpointError
from accelerate.storage.manifest import Manifest
from accelerate.storage.model_files import (
    torch_load_file,
)
from accelerate.storage.regular_files import open_regular
from accelerate.storage.verified_read import load_verified

logger = logging.getLogger(__name__)


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
            return load_verified(path, record, lambda p: torch_load_file(p, mmap=True))
        return load_verified(path, record, torch_load_file)


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
