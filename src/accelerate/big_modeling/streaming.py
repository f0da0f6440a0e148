"""Reading weight files one tensor at a time, so loading never holds a whole file in memory.

``iter_weights`` reads a safetensors file tensor by tensor with plain reads at the offsets its
header gives (no memory map, so no file pages count against the process); a ``.bin`` file is opened
with ``torch.load(mmap=True, weights_only=True)`` and copied out tensor by tensor.

``open_weights`` (what ``load_checkpoint_in_model`` uses) lists a file's tensors before reading
any, and lets the loader take each one either as a view of a private copy-on-write mapping of the
file (weights that stay on the CPU in the file's dtype: no copy at all, like ``safetensors``'
``load_file``) or read into memory of its own (weights that are cast, moved or offloaded).
"""

from __future__ import annotations

import functools
import json
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import torch

from accelerate.storage.errors import CheckpointError
from accelerate.storage.model_files import ALIASES_KEY
from accelerate.storage.safetensors_io import dtype_from_code


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


def iter_safetensors(
    path: str | os.PathLike[str], names: set[str] | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
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
        dtype = dtype_from_code(info["dtype"], source=str(path))
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


def _existing_weights_file(path: str | os.PathLike[str]) -> Path:
    """``path`` once it is a regular file: a FIFO or device there would block the read or misread."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Weights file {path} does not exist")
    from accelerate.storage.regular_files import check_regular

    check_regular(path)  # raises CheckpointError naming what it is instead
    return path


def _bin_tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors of a ``.bin`` state dict, memory-mapped where the format allows (no code runs:
    weights only); each is let go of as it is handed out, so the mapping goes once the caller's do."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:  # files from old torch.save (non-zip) cannot be memory-mapped
        state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, not a state dict")
    for name in list(state):
        value = state.pop(name)
        if isinstance(value, torch.Tensor):
            yield name, value


def iter_weights(path: str | os.PathLike[str]) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` pairs of one weights file, read one at a time where the format allows."""
    path = _existing_weights_file(path)
    if path.name.endswith(".safetensors"):
        yield from iter_safetensors(path)
        return
    for name, value in _bin_tensors(path):
        yield name, value.clone()  # detached from the mapped file


class StoredWeight:
    """One tensor of a weights file, before its data is touched: name, shape and dtype come from the
    file's header, and the data is fetched by whichever of :meth:`mapped` / :meth:`read` suits where
    it goes.

    ``aliases`` are other names the file records for the same tensor (shared tensors written once).
    """

    def __init__(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        aliases: list[str],
        mapped: Callable[[], torch.Tensor],
        read: Callable[[], torch.Tensor],
    ) -> None:
        self.name, self.shape, self.dtype, self.aliases = name, shape, dtype, aliases
        self._mapped, self._read = mapped, read
        self._fetched: torch.Tensor | None = None

    def tensor(self, mapped: bool) -> torch.Tensor:
        """The tensor, fetched once: the first call picks :meth:`mapped` or :meth:`read`, later calls
        (the other names of a tied weight) get the same tensor."""
        if self._fetched is None:
            self._fetched = self.mapped() if mapped else self.read()
        return self._fetched

    def mapped(self) -> torch.Tensor:
        """The tensor as a view of a private copy-on-write mapping of the file: no copy, pages are
        read when first used, and writing to the tensor (an optimizer step) never reaches the file.

        The file must stay where it is, unmodified, while the tensor is alive (replacing it with a
        new file, as ``save_model`` does, is fine: the mapping keeps the old one).
        """
        return self._mapped()

    def read(self) -> torch.Tensor:
        """The tensor in memory of its own (for weights that are cast, moved or written elsewhere,
        so that the file's pages do not stay resident once the copy is made)."""
        return self._read()


def open_weights(path: str | os.PathLike[str]) -> Iterator[StoredWeight]:
    """The tensors of one weights file (``.safetensors``, ``.bin`` / ``.pt``) as :class:`StoredWeight` s,
    in file order; nothing is read until a tensor is asked for.

    A ``.bin`` file is opened with ``torch.load(mmap=True)`` (also a private mapping), so its
    ``mapped`` and ``read`` tensors are both views of the mapping; files from the legacy
    (non-zip) ``torch.save`` cannot be mapped and are read whole.
    """
    path = _existing_weights_file(path)
    if path.name.endswith(".safetensors"):
        yield from _open_safetensors(path)
        return
    for name, value in _bin_tensors(path):
        yield StoredWeight(name, tuple(value.shape), value.dtype, [], _given(value), _given(value))


def _given(value: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: value


def _open_safetensors(path: Path) -> Iterator[StoredWeight]:
    entries, metadata, start = safetensors_header(path)
    aliases: dict[str, str] = json.loads(metadata.get(ALIASES_KEY, "{}"))
    size = path.stat().st_size
    storage: list[torch.UntypedStorage] = []  # the file's private mapping, made on first use

    def view(name: str, info: dict[str, Any], shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        begin, end = (start + int(x) for x in info["data_offsets"])
        if end > size:
            raise CheckpointError(
                f"{path}: tensor {name!r} is truncated ({max(size - begin, 0)} of {end - begin} bytes)"
            )
        if begin % dtype.itemsize:  # not aligned for a view of this dtype (the format does not require it)
            return read(name, info)
        if not storage:
            mapping = torch.UntypedStorage.from_file(os.fspath(path), shared=False, nbytes=size)
            storage.append(cast(torch.UntypedStorage, mapping))
        strides = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
        return torch.empty((0,), dtype=dtype).set_(storage[0], begin // dtype.itemsize, shape, strides)

    def read(name: str, info: dict[str, Any]) -> torch.Tensor:
        with open(path, "rb", buffering=0) as handle:
            return _read(handle, start, name, info, path)

    for name, info in sorted(entries.items(), key=lambda item: item[1]["data_offsets"][0]):
        try:
            shape = tuple(int(d) for d in info["shape"])
            dtype = dtype_from_code(info["dtype"], source=str(path))
            _ = [int(x) for x in info["data_offsets"]]
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(f"{path}: malformed safetensors entry for {name!r}: {info!r}") from error
        yield StoredWeight(
            name,
            shape,
            dtype,
            [alias for alias, target in aliases.items() if target == name],
            functools.partial(view, name, info, shape, dtype),
            functools.partial(read, name, info),
        )
