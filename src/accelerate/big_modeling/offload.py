"""Weights kept outside the model: an offload folder of raw ``.dat`` files, or safetensors files.

The folder format: one ``{name}.dat`` per tensor (raw bytes, read back through ``np.memmap`` so only
that tensor is read) and ``index.json`` mapping each name to ``{"dtype", "shape"}``. An index entry
may instead point into a safetensors file (``{"safetensors_file", "weight_name", "dtype"}``), which
is how a checkpoint is used in place without writing a copy.
"""

from __future__ import annotations

import functools
import json
import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

INDEX_FILE = "index.json"


def offload_weight(
    weight: torch.Tensor,
    weight_name: str,
    offload_folder: str | os.PathLike[str],
    index: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Writes ``weight`` to ``{offload_folder}/{weight_name}.dat``; records it in ``index`` if given."""
    import numpy as np

    dtype_name = str(weight.dtype).removeprefix("torch.")
    tensor = weight.detach().to("cpu").contiguous()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16)  # numpy has no bfloat16; the index keeps the real dtype
    array = tensor.numpy()
    if index is not None:
        index[weight_name] = {"dtype": dtype_name, "shape": list(array.shape)}
    if array.ndim == 0:
        array = array[None]  # memmap cannot hold a 0-d array
    path = Path(offload_folder) / f"{weight_name}.dat"
    if array.size == 0:
        path.write_bytes(b"")
        return index
    mapped = np.memmap(path, dtype=array.dtype, mode="w+", shape=array.shape)
    mapped[...] = array
    mapped.flush()
    del mapped
    return index


def load_offloaded_weight(
    weight_file: str | os.PathLike[str], weight_info: Mapping[str, Any]
) -> torch.Tensor:
    """Reads one tensor written by :func:`offload_weight` (only that file's bytes are read).

    The tensor maps the file privately (copy-on-write): nothing is copied up front, and writing to
    the tensor never changes the file. It reads the file while alive, so the offload folder must
    stay as written while the tensor is in use (the offload hooks hold it for one forward).
    """
    shape = tuple(int(d) for d in weight_info["shape"])
    dtype_name = str(weight_info["dtype"]).removeprefix("torch.")
    dtype = getattr(torch, dtype_name)
    if 0 in shape:
        return torch.empty(shape, dtype=dtype)
    stored = torch.int16 if dtype == torch.bfloat16 else dtype  # numpy has no bfloat16 (see offload_weight)
    count = 1
    for dim in shape:
        count *= dim
    needed = count * stored.itemsize
    size = os.path.getsize(weight_file)
    if size != needed:
        raise OSError(
            f"offloaded weight {weight_file} holds {size} bytes, but {dtype_name}{list(shape)} needs "
            f"{needed}: the offload folder is damaged; offload the model again"
        )
    # A private, copy-on-write mapping: no bytes are copied, pages come from the page cache as the
    # forward reads them, and the mapping goes away with the tensor (the hooks drop it after use).
    tensor = torch.from_file(os.fspath(weight_file), shared=False, size=count, dtype=stored).view(
        shape or (1,)
    )
    if not shape:
        tensor = tensor[0]
    if dtype == torch.bfloat16:
        tensor = tensor.view(torch.bfloat16)
    return tensor


def save_offload_index(index: Mapping[str, Any], offload_folder: str | os.PathLike[str]) -> None:
    """Merges ``index`` into ``{offload_folder}/index.json`` (created if missing)."""
    if not index:
        return
    path = Path(offload_folder) / INDEX_FILE
    current = json.loads(path.read_text()) if path.exists() else {}
    current.update(index)
    path.write_text(json.dumps(current, indent=2))


def offload_state_dict(save_dir: str | os.PathLike[str], state_dict: Mapping[str, torch.Tensor]) -> None:
    """Writes every tensor of ``state_dict`` into ``save_dir`` in the offload-folder format."""
    os.makedirs(save_dir, exist_ok=True)
    index: dict[str, Any] = {}
    for name, tensor in state_dict.items():
        offload_weight(tensor, name, save_dir, index=index)
    save_offload_index(index, save_dir)


@functools.lru_cache(maxsize=64)
def _safetensors_layout(
    path: str, mtime_ns: int
) -> tuple[int, dict[str, tuple[str, tuple[int, ...], int, int]]]:
    """The data offset and ``name -> (dtype code, shape, begin, end)`` of a safetensors file.

    Parsed once per file (and again if the file changes): re-reading the header for every tensor of
    every forward would cost time growing with the number of tensors in the file.
    """
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    header.pop("__metadata__", None)
    entries = {
        name: (str(info["dtype"]), tuple(int(d) for d in info["shape"]), *map(int, info["data_offsets"]))
        for name, info in header.items()
    }
    return 8 + length, entries  # type: ignore[return-value]


def _mapped_safetensor(path: str, name: str) -> torch.Tensor:
    """One tensor of a safetensors file, mapped privately (copy-on-write) rather than read.

    Nothing is copied up front; the pages come from the page cache as they are used, and the mapping
    (with whatever of it became resident) goes away with the tensor.
    """
    import numpy as np

    from accelerate.storage.safetensors_io import dtype_from_code

    start, entries = _safetensors_layout(path, os.stat(path).st_mtime_ns)
    if name not in entries:
        raise KeyError(f"{name!r} is not in {path} (the offload index points at a tensor the file lacks)")
    code, shape, begin, end = entries[name]
    dtype = dtype_from_code(code, source=path)
    if end == begin:
        return torch.empty(shape, dtype=dtype)
    raw = np.memmap(path, dtype=np.uint8, mode="c", offset=start + begin, shape=(end - begin,))
    return torch.from_numpy(raw).view(dtype).reshape(shape)


class PrefixedDataset(Mapping[str, Any]):
    """The entries of ``dataset`` whose keys start with ``prefix``, seen without the prefix."""

    def __init__(self, dataset: Mapping[str, Any], prefix: str) -> None:
        self.dataset = dataset
        self.prefix = prefix

    def __getitem__(self, key: str) -> Any:
        return self.dataset[f"{self.prefix}{key}"]

    def __iter__(self) -> Iterator[str]:
        return (key[len(self.prefix) :] for key in self.dataset if key.startswith(self.prefix))

    def __len__(self) -> int:
        return sum(1 for key in self.dataset if key.startswith(self.prefix))


class OffloadedWeightsLoader(Mapping[str, torch.Tensor]):
    """A read-only mapping over weights in memory (``state_dict``) and on disk (``save_folder`` / ``index``).

    Disk weights are read on each access, one tensor at a time, so holding the loader costs no memory.

    Args:
        state_dict: weights already in memory.
        save_folder: an offload folder (its ``index.json`` is read unless ``index`` is given).
        index: name -> ``{"dtype", "shape"}`` (a ``.dat`` file in ``save_folder``) or
            ``{"safetensors_file", "weight_name", "dtype"}``.
        device: where safetensors weights are read to (default: CPU).
    """

    def __init__(
        self,
        state_dict: Mapping[str, torch.Tensor] | None = None,
        save_folder: str | os.PathLike[str] | None = None,
        index: Mapping[str, Any] | None = None,
        device: int | str | torch.device | None = None,
    ) -> None:
        if state_dict is None and save_folder is None and index is None:
            raise ValueError(
                "OffloadedWeightsLoader needs a state_dict, a save_folder or an index (got none)"
            )
        self.state_dict: Mapping[str, torch.Tensor] = {} if state_dict is None else state_dict
        self.save_folder = save_folder
        if index is None and save_folder is not None:
            path = Path(save_folder) / INDEX_FILE
            index = json.loads(path.read_text()) if path.exists() else {}
        self.index: Mapping[str, Any] = {} if index is None else index
        self.all_keys = list(self.state_dict) + [key for key in self.index if key not in self.state_dict]
        self.device = device

    def __getitem__(self, key: str) -> torch.Tensor:
        if key in self.state_dict:
            return self.state_dict[key]
        info = self.index[key]
        if "safetensors_file" in info:
            return self._from_safetensors(info, key)
        if self.save_folder is None:
            raise KeyError(f"{key!r} is in the offload index as a .dat file but no save_folder was given")
        # os.path.join, not pathlib: this runs for every offloaded tensor of every forward.
        return load_offloaded_weight(os.path.join(self.save_folder, f"{key}.dat"), info)

    def _from_safetensors(self, info: Mapping[str, Any], key: str) -> torch.Tensor:
        if self.device not in (None, "cpu") and str(self.device) != "cpu":
            from safetensors import safe_open

            with safe_open(info["safetensors_file"], framework="pt", device=str(self.device)) as handle:
                tensor: torch.Tensor = handle.get_tensor(info.get("weight_name", key))
        else:
            tensor = _mapped_safetensor(info["safetensors_file"], info.get("weight_name", key))
        wanted = info.get("dtype")
        if wanted is not None:
            dtype = getattr(torch, str(wanted).removeprefix("torch."))
            if tensor.dtype != dtype:
                tensor = tensor.to(dtype)
        return tensor

    def __iter__(self) -> Iterator[str]:
        return iter(self.all_keys)

    def __len__(self) -> int:
        return len(self.all_keys)


def extract_submodules_state_dict(
    state_dict: Mapping[str, torch.Tensor], submodule_names: Iterable[str]
) -> dict[str, torch.Tensor]:
    """The entries of ``state_dict`` that belong to one of ``submodule_names`` (or are one of them)."""
    names = list(submodule_names)
    return {
        key: value
        for key, value in state_dict.items()
        if any(name == "" or key == name or key.startswith(f"{name}.") for name in names)
    }
