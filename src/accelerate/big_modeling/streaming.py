"""Reading weight files one tensor at a time, so loading never holds a whole file in memory.

A safetensors file is read tensor by tensor with plain reads at the offsets its header gives (no
memory map, so no file pages count against the process); a ``.bin`` file is opened with
``torch.load(mmap=True, weights_only=True)`` and copied out tensor by tensor.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import torch

from accelerate.checkpointing.errors import CheckpointError
from accelerate.checkpointing.model_files import ALIASES_KEY
from accelerate.checkpointing.safetensors_io import _CODES


def safetensors_header(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, str], int]:
    """``(entries, metadata, data start)`` of a safetensors file (the header only is read)."""
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path} is not a safetensors file (only {len(head)} bytes)")
        (length,) = struct.unpack("<Q", head)
        try:
            header = json.loads(handle.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CheckpointError(f"{path} has an unreadable safetensors header: {error}") from error
    metadata = header.pop("__metadata__", None) or {}
    return header, metadata, 8 + length


def iter_safetensors(path: str | os.PathLike[str], names: set[str] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Yields ``(name, tensor)`` for each tensor of the file (or those in ``names``), each freshly read."""
    entries, metadata, start = safetensors_header(path)
    aliases: dict[str, str] = json.loads(metadata.get(ALIASES_KEY, "{}"))
    with open(path, "rb", buffering=0) as handle:
        for name, info in sorted(entries.items(), key=lambda item: item[1]["data_offsets"][0]):
            wanted = [name] + [alias for alias, target in aliases.items() if target == name]
            if names is not None and not any(n in names for n in wanted):
                continue
            tensor = _read(handle, start, name, info, path)
            for key in wanted:
                yield key, tensor


def _read(handle: Any, start: int, name: str, info: dict[str, Any], path: Any) -> torch.Tensor:
    try:
        dtype = _CODES[info["dtype"]]
        shape = [int(d) for d in info["shape"]]
        begin, end = (int(x) for x in info["data_offsets"])
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: malformed safetensors entry for {name!r}: {info!r}") from error
    tensor = torch.empty(shape, dtype=dtype)
    if end > begin:
        view = memoryview(cast(Any, tensor.reshape(-1).view(torch.uint8).numpy()))
        handle.seek(start + begin)
        got = handle.readinto(view)
        if got != end - begin:
            raise CheckpointError(f"{path}: tensor {name!r} is truncated ({got} of {end - begin} bytes)")
    return tensor


def iter_weights(path: str | os.PathLike[str]) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` pairs of one weights file, read one at a time where the format allows."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Weights file {path} does not exist")
    if path.name.endswith(".safetensors"):
        yield from iter_safetensors(path)
        return
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:  # files from old torch.save (non-zip) cannot be memory-mapped
        state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a state dict")
    for name in list(state):
        value = state.pop(name)
        if isinstance(value, torch.Tensor):
            yield name, value.clone()  # detached from the mapped file
