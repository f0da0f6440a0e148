"""Model weight files in the Hugging Face layout: single files, size-based shards and their index.

Names follow the ecosystem convention so folders open in tools that read it:
``model.safetensors`` or ``model-00001-of-00003.safetensors`` + ``model.safetensors.index.json``,
and ``pytorch_model.bin`` / ``pytorch_model-00001-of-00002.bin`` + ``pytorch_model.bin.index.json``.

Tensors that share memory (tied weights) are stored once; the other names are recorded as aliases
(in the safetensors metadata and in the index metadata under ``accelerate_aliases``) and restored on
load. ``.bin`` files are read with ``torch.load(weights_only=True)``: no arbitrary code runs on load.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from accelerate.storage.durable_io import (
    FileRecord,
    SyncGroup,
    fsync_dir,
    save_torch,
    write_bytes,
    write_file,
)
from accelerate.storage.errors import CheckpointError
from accelerate.storage.regular_files import check_regular, open_regular
from accelerate.storage.safetensors_io import read_safetensors, write_safetensors
from accelerate.storage.sizes import parse_size
from accelerate.storage.verified_read import load_verified, read_verified

SAFE_WEIGHTS_NAME = "model.safetensors"
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
WEIGHTS_NAME = "pytorch_model.bin"
WEIGHTS_INDEX_NAME = "pytorch_model.bin.index.json"
ALIASES_KEY = "accelerate_aliases"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


# --- preparing a state dict -------------------------------------------------------------------------
@dataclass
class PreparedStateDict:
    """A state dict ready to write: CPU contiguous tensors, each storage once, plus the alias names."""

    tensors: dict[str, torch.Tensor]
    aliases: dict[str, str]  # alias name -> stored name
    others: dict[str, Any]  # non-tensor entries (e.g. a module's extra state); .bin only


def tensor_identity(tensor: torch.Tensor) -> tuple[Any, ...]:
    """A key equal for two tensors exactly when they are the same view of the same memory (shared ties)."""
    return (
        tensor.device,
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.dtype,
    )


def _compact(tensor: torch.Tensor, *, own_storage: bool) -> torch.Tensor:
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        return tensor.to("cpu")  # a device-to-host copy is already compact
    if not tensor.is_contiguous():
        return tensor.contiguous()
    if own_storage and tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size():
        # torch.save writes a view's whole storage; copy so a slice of a big buffer saves only the slice.
        return tensor.clone()
    return tensor


def prepare_state_dict(state_dict: Mapping[str, Any], *, safetensors: bool) -> PreparedStateDict:
    """Makes tensors CPU-contiguous and stores every shared tensor once (the rest become aliases).

    Raises:
        ValueError: for tensors on the meta device (weights that were never materialised).
        TypeError: for non-tensor entries when writing safetensors, which only holds tensors.

    Device tensors without a storage to compare (a lazy device's) are copied to the host by the caller first
    (``CheckpointIO.host_copy``, one copy per tensor, so tied ones stay tied).
    """
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    others: dict[str, Any] = {}
    seen: dict[tuple[Any, ...], str] = {}
    for name, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            if safetensors:
                raise TypeError(
                    f"State dict entry {name!r} is a {type(value).__name__}, not a tensor; safetensors stores "
                    "tensors only. Save with safe_serialization=False to keep it."
                )
            others[name] = value
            continue
        if value.device.type == "meta":
            raise ValueError(
                f"Cannot save {name!r}: it is on the meta device (never loaded or offloaded). Load or "
                "materialise the weights before saving."
            )
        key = tensor_identity(value)
        if key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        tensors[name] = _compact(value, own_storage=not safetensors)
    return PreparedStateDict(tensors, aliases, others)


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def plan_shards(tensors: Mapping[str, torch.Tensor], max_bytes: int) -> list[list[str]]:
    """Greedy split in state-dict order; a tensor larger than ``max_bytes`` gets a shard of its own."""
    shards: list[list[str]] = [[]]
    size = 0
    for name, tensor in tensors.items():
        nbytes = _nbytes(tensor)
        if shards[-1] and size + nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


# --- writing ----------------------------------------------------------------------------------------
def write_weights_file(
    path: str | os.PathLike[str],
    prepared: PreparedStateDict,
    names: list[str] | None = None,
    *,
    sync: SyncGroup | None = None,
    checksum: bool = True,
    ready: Callable[[torch.Tensor], None] | None = None,
) -> FileRecord:
    """Writes (a subset of) a prepared state dict as safetensors or ``torch.save`` by ``path``'s suffix.

    ``ready``: called with each tensor before its bytes are needed (``HostStaging.ready``).
    """
    keys = list(prepared.tensors) if names is None else names
    tensors = {name: prepared.tensors[name] for name in keys}
    if str(path).endswith(".safetensors"):
        metadata = {"format": "pt"}  # transformers refuses safetensors files without it
        if names is None and prepared.aliases:
            metadata[ALIASES_KEY] = json.dumps(prepared.aliases, sort_keys=True)
        return write_file(
            path,
            lambda sink: write_safetensors(sink.write, tensors, metadata, ready),
            sync=sync,
            checksum=checksum,
        )
    payload: dict[str, Any] = dict(tensors)
    if names is None:
        # One pickle keeps sharing natively: alias entries point at the same tensor, stored once.
        payload.update({alias: tensors[target] for alias, target in prepared.aliases.items()})
        payload.update(prepared.others)
    if ready is not None:
        for tensor in tensors.values():
            ready(tensor)
    return save_torch(payload, path, sync=sync, checksum=checksum)


def _durable_replace(path: Path, produce: Any) -> None:
    partial = path.with_name(f".partial-{path.name}")  # keeps the suffix, which picks the format
    produce(partial)
    os.replace(partial, path)


def save_model_files(
    state_dict: Mapping[str, Any],
    save_directory: str | os.PathLike[str],
    *,
    max_shard_size: int | str = "10GB",
    safe_serialization: bool = True,
    is_main_process: bool = True,
) -> list[Path]:
    """Writes a model's weights to ``save_directory`` in the Hugging Face layout; returns the files.

    Only the main process writes (others return ``[]``). Each file is written under a temporary name,
    fsynced and renamed, and the index last, so a crash never leaves a half-written file under a
    real name. Weight files of the same family left by an earlier save (e.g. a different number of
    shards) are removed afterwards; other files in the folder are left alone.

    Example:
        >>> save_model_files(model.state_dict(), "out", max_shard_size="200MB")
        [PosixPath('out/model-00001-of-00002.safetensors'), ..., PosixPath('out/model.safetensors.index.json')]
    """
    if not is_main_process:
        return []
    directory = Path(save_directory)
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"save_directory {directory} is a file; give a folder path")
    directory.mkdir(parents=True, exist_ok=True)
    limit = parse_size(max_shard_size)
    prepared = prepare_state_dict(state_dict, safetensors=safe_serialization)
    single, index_name = (
        (SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME)
        if safe_serialization
        else (WEIGHTS_NAME, WEIGHTS_INDEX_NAME)
    )
    stem, suffix = single.rsplit(".", 1)
    shards = plan_shards(prepared.tensors, limit)
    if prepared.others and len(shards) > 1:
        raise ValueError(
            f"Non-tensor entries {sorted(prepared.others)} cannot be sharded; raise max_shard_size"
        )
    written: list[Path] = []
    if len(shards) == 1:
        target = directory / single
        _durable_replace(target, lambda tmp: write_weights_file(tmp, prepared, checksum=False))
        written.append(target)
    else:
        weight_map: dict[str, str] = {}
        for i, names in enumerate(shards, start=1):
            target = directory / f"{stem}-{i:05d}-of-{len(shards):05d}.{suffix}"
            _durable_replace(
                target, lambda tmp, names=names: write_weights_file(tmp, prepared, names, checksum=False)
            )
            weight_map.update(dict.fromkeys(names, target.name))
            written.append(target)
        metadata: dict[str, Any] = {"total_size": sum(_nbytes(t) for t in prepared.tensors.values())}
        if prepared.aliases:
            metadata[ALIASES_KEY] = dict(sorted(prepared.aliases.items()))
        index = json.dumps({"metadata": metadata, "weight_map": weight_map}, indent=2, sort_keys=True)
        target = directory / index_name
        _durable_replace(target, lambda tmp: write_bytes(tmp, index.encode("utf-8")))
        written.append(target)
    _remove_stale_weights(directory, stem, suffix, index_name, keep={p.name for p in written})
    fsync_dir(directory)
    return written


def _remove_stale_weights(directory: Path, stem: str, suffix: str, index_name: str, keep: set[str]) -> None:
    for entry in directory.iterdir():
        name = entry.name
        family = (
            name == f"{stem}.{suffix}"
            or name == index_name
            or (name.startswith(f"{stem}-") and name.endswith(f".{suffix}") and "-of-" in name)
        )
        if family and name not in keep and entry.is_file():
            entry.unlink()


# --- reading ----------------------------------------------------------------------------------------
def _utf8_name(path: Path) -> bool:
    """Whether ``path`` can be handed to torch's C++ file reader (it encodes names as UTF-8)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def torch_load_file(path: Path, *, mmap: bool = False) -> Any:
    """``torch.load(weights_only=True)`` of a regular file (see ``open_regular``), onto the CPU."""
    try:
        # torch maps a file by a UTF-8 name only; a folder whose name is other bytes is read instead.
        if mmap and _utf8_name(path):
            check_regular(path)  # torch maps the file by name: check what the name is first
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        with open_regular(path) as handle:
            return torch.load(handle, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{path} holds Python objects that are not plain tensors or containers, and it is loaded with "
            f"torch.load(weights_only=True) so that no code in the file can run. If you trust the file, "
            f"allow the named classes with torch.serialization.add_safe_globals([...]) before loading. "
            f"Details: {exc}"
        ) from exc
    except (RuntimeError, EOFError, ValueError) as exc:
        raise CheckpointError(f"Cannot read {path}: {exc} (truncated or not a torch.save file?)") from exc


def load_state_dict_file(path: str | os.PathLike[str], record: FileRecord | None = None) -> dict[str, Any]:
    """Loads a ``.safetensors`` / ``.bin`` / ``.pt`` weights file onto the CPU, without pickle code.

    Args:
        path: the file.
        record: size and checksum from a checkpoint manifest; when given the file is verified and a
            damaged one raises :class:`CheckpointError` naming it.
    """
    path = Path(path)
    if not os.path.lexists(path):
        raise CheckpointError(f"Weights file {path} does not exist")
    if path.name.endswith(".safetensors"):
        buffer = read_verified(path, record)
        tensors, metadata = read_safetensors(buffer, source=str(path))
        aliases = json.loads(metadata.get(ALIASES_KEY, "{}"))
        out: dict[str, Any] = dict(tensors)
        out.update({alias: tensors[target] for alias, target in aliases.items() if target in tensors})
        return out
    state = load_verified(path, record, torch_load_file)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a state dict")
    return state


def read_index(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """``(weight_map, aliases)`` of a shard index file.

    An index without a ``weight_map`` key is read as the weight map itself (``{name: file}``), as
    upstream does; one whose entries are not all file names then raises, naming the first such entry.
    """
    try:
        with open_regular(path) as handle:
            data = json.loads(handle.readall().decode("utf-8"))
        if not isinstance(data, dict):
            raise TypeError(f"the index holds a {type(data).__name__}, not a JSON object")
        mapping = data.get("weight_map", data)
        weight_map = {str(k): str(v) for k, v in mapping.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"Cannot read the shard index {path}: {exc!r}") from exc
    if "weight_map" not in data:
        odd = next((k for k, v in data.items() if not isinstance(v, str)), None)
        if odd is not None:
            raise CheckpointError(
                f"The shard index {path} has no 'weight_map', and read as one (weight name -> file) its entry "
                f"{odd!r} is not a file name; add the 'weight_map' key ({{\"weight_map\": {{name: file}}}})."
            )
        return weight_map, {}
    aliases = (data.get("metadata") or {}).get(ALIASES_KEY) or {}
    return weight_map, {str(k): str(v) for k, v in aliases.items()}


def _is_entry(path: Path) -> bool:
    """A file, or something else that is not a folder (a FIFO, a device): reading it refuses those."""
    return path.exists() and not path.is_dir()


def resolve_checkpoint(checkpoint: str | os.PathLike[str]) -> tuple[list[Path], dict[str, str]]:
    """The weight files a checkpoint path stands for, and aliases recorded in its index.

    ``checkpoint`` may be a weights file, a ``*.index.json`` file, or a folder holding an index
    (safetensors preferred), ``model.safetensors`` / ``pytorch_model.bin``, or exactly one weights file.
    """
    path = Path(checkpoint)
    if _is_entry(path):
        if path.name.endswith(".index.json"):
            weight_map, aliases = read_index(path)
            files = sorted({path.parent / name for name in weight_map.values()})
            return files, aliases
        return [path], {}
    if not path.is_dir():
        raise FileNotFoundError(f"Checkpoint {path} does not exist")
    for name in (SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_NAME):
        if _is_entry(path / name):
            return resolve_checkpoint(path / name)
    indexes = sorted(path.glob("*.index.json"))
    if len(indexes) == 1:
        return resolve_checkpoint(indexes[0])
    weights = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    if len(weights) == 1 and not indexes:
        return weights, {}
    raise ValueError(
        f"Cannot tell which weights to load from folder {path}: expected {SAFE_WEIGHTS_NAME}, {WEIGHTS_NAME}, "
        f"one *.index.json or a single weights file; found {[p.name for p in [*indexes, *weights]] or 'none'}. "
        "Pass the file path instead."
    )
