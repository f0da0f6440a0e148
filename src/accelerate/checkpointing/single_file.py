"""One object to one file (``accelerate.utils.save`` / ``load``, ``Accelerator.save``), written durably.

A path is written as checkpoint files are: under a temporary name in the same folder, fsynced, then
renamed over the target and the folder entry fsynced, so a crash leaves either the old file or the
complete new one, never a torn file under the real name. A file object is written as it is.

Loading uses ``torch.load(weights_only=True)`` by default (no code from the file runs), with NumPy's
array types allowed (``TORCH_SAFE_GLOBALS``) since random-number states hold NumPy arrays.
"""

from __future__ import annotations

import codecs
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, cast

import numpy
import torch

from accelerate.checkpointing.rng import numpy_safe_globals
from accelerate.storage.atomic import helper_name
from accelerate.storage.durable_io import fsync_dir, write_file
from accelerate.storage.model_files import (
    ALIASES_KEY,
    prepare_state_dict,
    tensor_identity,
    write_weights_file,
)
from accelerate.storage.safetensors_io import write_safetensors
from accelerate.utils.xla import xla_to_cpu

logger = logging.getLogger(__name__)

# NumPy's private core module, under its NumPy 2 name or the older one.
np_core: Any = getattr(numpy, "_core", None) or numpy.core

# What `load` lets torch's restricted unpickler rebuild besides tensors and plain containers: NumPy
# arrays and dtypes (random states, metrics) and `codecs.encode`, which NumPy pickles bytes with.
TORCH_SAFE_GLOBALS: list[Any] = [*numpy_safe_globals(), codecs.encode]


def clean_state_dict_for_safetensors(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``state_dict`` that safetensors can store: shared tensors once, all contiguous.

    Entries that are the same tensor as an earlier one (tied weights) are dropped, with a warning
    naming them; load such a file with ``strict=False`` or re-tie the weights afterwards (our own
    checkpoint files record the aliases instead). Tensors stay on their device.
    """
    seen: dict[tuple[Any, ...], str] = {}
    removed: dict[str, str] = {}
    out: dict[str, Any] = {}
    for name, value in state_dict.items():
        if isinstance(value, torch.Tensor):
            key = tensor_identity(value)
            if key in seen:
                removed[name] = seen[key]
                continue
            seen[key] = name
            value = value.contiguous()
        out[name] = value
    if removed:
        logger.warning(
            "Removed shared tensor(s) %s while preparing the state dict for safetensors (each is the same "
            "tensor as the entry named after it); load the file with strict=False or re-tie the weights.",
            ", ".join(f"{name} (= {kept})" for name, kept in removed.items()),
        )
    return out


def _prepared(obj: Any) -> Any:
    if not isinstance(obj, Mapping):
        raise TypeError(
            f"save(safe_serialization=True) stores a dict of tensors (a state dict), not a {type(obj).__name__}; "
            "pass safe_serialization=False for other objects"
        )
    _warn_shared(obj)
    return prepare_state_dict(obj, safetensors=True)  # tied tensors stored once, their aliases recorded


def _warn_shared(state_dict: Mapping[str, Any]) -> None:
    """Upstream's warning when tied tensors are stored once (its users' tests look for it)."""
    first: dict[tuple[Any, ...], str] = {}
    removed = []
    for name, value in state_dict.items():
        if isinstance(value, torch.Tensor):
            kept = first.setdefault(tensor_identity(value), name)
            if kept != name:
                removed.append(name)
    if removed:
        logger.warning(
            f"Removed shared tensor {set(removed)} while saving. This should be OK, but check by verifying that "
            "you don't receive any warning while reloading (the file records each as an alias of the tensor it "
            "shares memory with)."
        )


def host_copy_without_strategy(obj: Any) -> Any:
    """``obj`` as upstream's strategy-less functions write it (``utils.save``, ``save_accelerator_state``,
    ``save_custom_state``), which have no ``CheckpointIO.host_copy`` to ask.

    As upstream (which asks the process state), XLA tensors are copied to the CPU like torch_xla's
    ``xm.save``; without torch_xla loaded no XLA tensor can exist and ``obj`` comes back at once.
    Runs with an Accelerator go through their strategy's ``CheckpointIO`` instead.
    """
    return xla_to_cpu(obj)


def save_object(obj: Any, f: str | os.PathLike[str] | IO[bytes], *, safe_serialization: bool = False) -> None:
    """Writes ``obj`` to ``f`` (a path, durably and atomically; or a writable binary file object).

    ``safe_serialization=True`` writes safetensors (``obj`` must be a dict of tensors; tied tensors
    are stored once and restored by our loaders), else ``torch.save``. Tensors are written where
    they are: device tensors a file cannot carry are copied first (``CheckpointIO.host_copy``).
    """
    prepared = _prepared(obj) if safe_serialization else None
    if not isinstance(f, str | os.PathLike):
        if prepared is not None:
            metadata = {"format": "pt"}
            if prepared.aliases:
                metadata[ALIASES_KEY] = json.dumps(prepared.aliases, sort_keys=True)
            write_safetensors(f.write, prepared.tensors, metadata)
        else:
            torch.save(obj, f)
        return
    target = Path(f)
    if target.is_dir():
        raise IsADirectoryError(f"save: {target} is a folder; pass a file path (e.g. {target / 'model.pt'})")
    # write_weights_file picks the format by suffix: the temporary name keeps the one it needs.
    extension = ".safetensors" if prepared is not None else ""
    partial = target.with_name(helper_name(target.name, prefix=".partial-", suffix=extension))
    try:
        if prepared is not None:
            write_weights_file(partial, prepared, checksum=False)
        else:
            write_file(partial, lambda sink: torch.save(obj, cast(IO[bytes], sink)), checksum=False)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def load_object(f: str | os.PathLike[str] | IO[bytes], map_location: Any = None, **kwargs: Any) -> Any:
    """``torch.load(f, map_location, **kwargs)`` with ``weights_only=True`` unless told otherwise.

    NumPy arrays and dtypes are allowed (``TORCH_SAFE_GLOBALS``) for this call only; the process's
    own safe-globals list is left as it was.
    """
    kwargs.setdefault("weights_only", True)
    if not kwargs["weights_only"]:
        return torch.load(f, map_location=map_location, **kwargs)
    with torch.serialization.safe_globals(TORCH_SAFE_GLOBALS):
        return torch.load(f, map_location=map_location, **kwargs)


def save(
    obj: Any,
    f: str | os.PathLike[str] | IO[bytes],
    save_on_each_node: bool = False,
    safe_serialization: bool = False,
) -> None:
    """Saves ``obj`` from the main process only (each node's main process with ``save_on_each_node``).

    Args:
        obj: what to save (a state dict with ``safe_serialization=True``).
        f: a file path (written atomically and durably) or a binary file object.
        save_on_each_node: write on every node's local main process (for node-local disks).
        safe_serialization: safetensors instead of ``torch.save``.

    Example:
        >>> save(model.state_dict(), "weights.pt")
    """
    from accelerate.state import PartialState

    state = PartialState()
    if state.is_local_main_process if save_on_each_node else state.is_main_process:
        save_object(host_copy_without_strategy(obj), f, safe_serialization=safe_serialization)


def load(f: str | os.PathLike[str] | IO[bytes], map_location: Any = None, **kwargs: Any) -> Any:
    """Loads what :func:`save` wrote with ``torch.save`` (``weights_only=True`` unless given).

    Example:
        >>> state_dict = load("weights.pt", map_location="cpu")
    """
    return load_object(f, map_location=map_location, **kwargs)
