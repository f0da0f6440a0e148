"""The healing wire format: a training-state tree as a JSON header plus raw tensors, never pickle.

torchft's own transports (HTTP and process-group) describe the state with ``pickle``, so a peer
that can reach the port can run code in the healing process. Here the header is JSON (data only):
every tensor becomes ``{"t": i}`` with its dtype (from a fixed list) and shape, dict keys keep their
type (optimizer states key parameters by int), and anything that is not a tensor, a JSON scalar, a
dict, a list or a tuple is refused when the state is sent, naming where it sits.
"""

from __future__ import annotations

import json
import math
from typing import Any

import torch

# The dtypes a healing transfer may carry, by name (the header names them; nothing else is accepted).
DTYPES: dict[str, torch.dtype] = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float64, torch.float32, torch.float16, torch.bfloat16,
        torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
    )
}  # fmt: skip

# A header is a description, not data: anything longer is refused before it is parsed.
MAX_HEADER_BYTES = 64 * 1024 * 1024

_SCALARS = (bool, int, float, str, type(None))


def encode(tree: Any) -> tuple[bytes, list[torch.Tensor]]:
    """``tree`` as (JSON header bytes, its tensors in header order, contiguous on their device)."""
    tensors: list[torch.Tensor] = []
    specs: list[dict[str, Any]] = []

    def node(value: Any, where: str) -> Any:
        if isinstance(value, torch.Tensor):
            if type(value) is not torch.Tensor:
                raise TypeError(
                    f"healing state at {where} is a {type(value).__name__}; only plain tensors travel "
                    "(fault-tolerant replicas support DDP-style groups, not sharded DTensor models)."
                )
            name = str(value.dtype).removeprefix("torch.")
            if name not in DTYPES:
                raise TypeError(f"healing state at {where} has dtype {value.dtype}, which cannot travel.")
            specs.append({"dtype": name, "shape": list(value.shape)})
            tensors.append(value.detach().contiguous())
            return {"t": len(tensors) - 1}
        if isinstance(value, _SCALARS):
            if isinstance(value, float) and not math.isfinite(value):
                return {"f": repr(value)}  # JSON has no inf/nan; spelled as Python does
            return {"v": value}
        if isinstance(value, dict):
            items = []
            for key, item in value.items():
                if not isinstance(key, _SCALARS):
                    raise TypeError(f"healing state at {where} has a {type(key).__name__} key {key!r}.")
                items.append([key, node(item, f"{where}[{key!r}]")])
            return {"d": items}
        if isinstance(value, (list, tuple)):
            kind = "l" if isinstance(value, list) else "u"
            return {kind: [node(item, f"{where}[{i}]") for i, item in enumerate(value)]}
        raise TypeError(
            f"healing state at {where} is a {type(value).__name__}; only tensors, numbers, strings, None, "
            "dicts, lists and tuples travel (convert it in the object's state_dict())."
        )

    root = node(tree, "state")
    header = json.dumps({"tree": root, "tensors": specs}, allow_nan=False).encode()
    return header, tensors


def tensor_specs(header: bytes) -> tuple[Any, list[tuple[torch.dtype, tuple[int, ...]]]]:
    """The header's tree and each tensor's (dtype, shape), checked; raises ValueError on bad input."""
    if len(header) > MAX_HEADER_BYTES:
        raise ValueError(f"healing header of {len(header)} bytes is over the {MAX_HEADER_BYTES}-byte limit.")
    parsed = json.loads(header.decode("utf-8"))
    if not isinstance(parsed, dict) or not isinstance(parsed.get("tensors"), list) or "tree" not in parsed:
        raise ValueError("healing header is not a {tree, tensors} object.")
    specs: list[tuple[torch.dtype, tuple[int, ...]]] = []
    for spec in parsed["tensors"]:
        dtype = DTYPES.get(str(spec.get("dtype"))) if isinstance(spec, dict) else None
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if (
            dtype is None
            or not isinstance(shape, list)
            or not all(isinstance(s, int) and s >= 0 for s in shape)
        ):
            raise ValueError(f"healing header has a bad tensor description {spec!r}.")
        specs.append((dtype, tuple(shape)))
    return parsed["tree"], specs


def decode(tree: Any, tensors: list[torch.Tensor]) -> Any:
    """The state ``encode`` described, its tensors taken from ``tensors`` (already received)."""
    if not isinstance(tree, dict) or len(tree) != 1:
        raise ValueError(f"healing header has a bad node {tree!r}.")
    ((kind, body),) = tree.items()
    if kind == "t" and isinstance(body, int) and 0 <= body < len(tensors):
        return tensors[body]
    if kind == "v" and isinstance(body, _SCALARS):
        return body
    if kind == "f" and body in ("inf", "-inf", "nan"):
        return float(body)
    if kind == "d" and isinstance(body, list):
        out: dict[Any, Any] = {}
        for pair in body:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], _SCALARS)):
                raise ValueError(f"healing header has a bad dict entry {pair!r}.")
            out[pair[0]] = decode(pair[1], tensors)
        return out
    if kind in ("l", "u") and isinstance(body, list):
        items = [decode(item, tensors) for item in body]
        return items if kind == "l" else tuple(items)
    raise ValueError(f"healing header has a bad node {tree!r}.")
