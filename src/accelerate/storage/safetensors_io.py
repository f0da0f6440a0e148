"""Zero-copy reading and writing of the safetensors format.

The format (https://huggingface.co/docs/safetensors) is an 8-byte little-endian header length, a JSON
header mapping each name to ``dtype``, ``shape`` and ``data_offsets`` (plus an optional string map
``__metadata__``), then the raw tensor bytes. It holds no code, so reading it is safe.

We write and read it here instead of through the ``safetensors`` package so that bytes are hashed
while they stream (writes go straight from tensor memory to the file; reads hash the one buffer the
tensors then view), which keeps checksums from costing an extra pass or copy. Files are interchangeable
with the package's (tests check both directions).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch

from accelerate.storage.errors import CheckpointError

_DTYPES: dict[torch.dtype, str] = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.complex64: "C64",
}
for _name, _code in (
    ("float8_e4m3fn", "F8_E4M3"),
    ("float8_e5m2", "F8_E5M2"),
    ("uint16", "U16"),
    ("uint32", "U32"),
    ("uint64", "U64"),
):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _code
_CODES: dict[str, torch.dtype] = {code: dtype for dtype, code in _DTYPES.items()}

# A header larger than this is a corrupt length field, not a real header (the package uses 100 MB too).
_MAX_HEADER = 100 * 1024 * 1024


def dtype_from_code(code: str, *, source: str) -> torch.dtype:
    """The torch dtype of a safetensors dtype code (``"F32"``, ``"BF16"``, ...)."""
    try:
        return _CODES[code]
    except KeyError:
        raise CheckpointError(f"{source}: unknown safetensors dtype {code!r}") from None


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The bytes of a CPU contiguous tensor, without copying."""
    if tensor.numel() == 0:
        return memoryview(b"")
    # view(uint8) needs at least one dimension; reshape(-1) is free for contiguous tensors.
    return memoryview(cast(Any, tensor.reshape(-1).view(torch.uint8).numpy()))


def write_safetensors(
    write: Callable[[memoryview | bytes], Any],
    tensors: Mapping[str, torch.Tensor],
    metadata: Mapping[str, str] | None = None,
    ready: Callable[[torch.Tensor], None] | None = None,
) -> None:
    """Streams ``tensors`` in safetensors format through ``write``.

    ``ready(tensor)``, when given, is called just before a tensor's bytes are written (a host copy
    still landing: ``HostStaging.ready``), so the header and earlier tensors go out meanwhile.

    Tensors must be on the CPU and contiguous (see ``model_files.prepare_state_dict``). They are laid
    out by decreasing element size, then name, so every offset stays aligned for its dtype and a reader
    can view the bytes without copying (the order the safetensors package uses too).
    """
    order = sorted(tensors, key=lambda name: (-tensors[name].element_size(), name))
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name in order:
        tensor = tensors[name]
        if tensor.dtype not in _DTYPES:
            raise TypeError(f"safetensors cannot store {name!r} of dtype {tensor.dtype}")
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            raise ValueError(f"{name!r} must be a contiguous CPU tensor to be written (got {tensor.device})")
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": _DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # pad so the data section starts 8-byte aligned
    write(struct.pack("<Q", len(encoded)))
    write(encoded)
    for name in order:
        if ready is not None:
            ready(tensors[name])
        data = tensor_bytes(tensors[name])
        if len(data):
            write(data)


def read_safetensors(
    buffer: bytearray | memoryview, *, source: str
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Parses a whole safetensors file held in ``buffer``; tensors view the buffer (no copy).

    Raises:
        CheckpointError: naming ``source`` when the header or the offsets are malformed (e.g. a
            truncated file).
    """
    total = len(buffer)
    if total < 8:
        raise CheckpointError(f"{source} is not a safetensors file: only {total} bytes (truncated?)")
    (header_len,) = struct.unpack_from("<Q", buffer, 0)
    if header_len > min(_MAX_HEADER, total - 8):
        raise CheckpointError(
            f"{source} has an invalid safetensors header length {header_len} (file truncated or corrupt)"
        )
    try:
        header = json.loads(bytes(buffer[8 : 8 + header_len]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{source} has an unreadable safetensors header: {exc}") from exc
    if not isinstance(header, dict):
        raise CheckpointError(f"{source} has a safetensors header that is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    base = 8 + header_len
    tensors: dict[str, torch.Tensor] = {}
    for name, info in header.items():
        tensors[name] = _view(buffer, base, name, info, source)
    return tensors, dict(metadata)


def _view(buffer: bytearray | memoryview, base: int, name: str, info: Any, source: str) -> torch.Tensor:
    try:
        dtype = _CODES[info["dtype"]]
        shape = [int(d) for d in info["shape"]]
        begin, end = (int(x) for x in info["data_offsets"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{source}: malformed header entry for {name!r}: {info!r}") from exc
    numel = 1
    for dim in shape:
        numel *= dim
    itemsize = torch.empty((), dtype=dtype).element_size()
    if end - begin != numel * itemsize or begin < 0 or base + end > len(buffer):
        raise CheckpointError(
            f"{source}: tensor {name!r} ({info['dtype']}{shape}) spans bytes {begin}..{end} but the data section "
            f"holds {len(buffer) - base} bytes (file truncated or corrupt)"
        )
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    start = base + begin
    raw = torch.frombuffer(buffer, dtype=torch.uint8, count=end - begin, offset=start)
    if start % itemsize:
        # Files from other writers may leave a tensor unaligned: copy it to an aligned allocation.
        raw = raw.clone()
    return raw.view(dtype).view(shape)
