"""A consistent host copy of the training state, taken in the caller's thread for a background save.

``save_state(async_save=True)`` returns as soon as this copy exists: training may change every
parameter, optimizer moment and generator right after, while the writer thread writes the copy.
Every tensor is copied to host memory (views of the same tensor stay one tensor, so tied weights
are still stored once); everything else in a ``state_dict()`` is copied with ``copy.deepcopy``.

The copy's memory is kept for the next snapshot (:class:`HostBuffers`): copying into memory that is
already mapped runs at memory speed, while fresh memory costs a page fault per 4 KiB, which made a
first copy several times slower than later ones. So one host copy of the state stays allocated
between saves, and no more.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from accelerate.storage.model_files import tensor_identity
from accelerate.storage.state_tree import map_leaves

__all__ = ["FrozenState", "HostBuffers", "host_copy", "snapshot_objects"]

# Values that cannot change after the call, so sharing them with the live state is safe.
_IMMUTABLE = (int, float, complex, bool, str, bytes, type(None), torch.dtype, torch.device, torch.Size)


class FrozenState:
    """Stands in for a live object in the writer: ``state_dict()`` returns the copy taken earlier."""

    def __init__(self, state: Any) -> None:
        self._state = state

    def state_dict(self) -> Any:
        return self._state


class _NoState:
    """Stands in for a dataloader without ``state_dict()`` (its generator is in the random states)."""


class HostBuffers:
    """Host tensors of an earlier snapshot, handed out again for tensors of the same dtype and size."""

    def __init__(self) -> None:
        self._free: dict[tuple[torch.dtype, int, bool], list[torch.Tensor]] = {}

    def take(self, dtype: torch.dtype, numel: int, pinned: bool) -> torch.Tensor:
        """A flat tensor of ``numel`` elements: a kept one if there is one, else a new one."""
        kept = self._free.get((dtype, numel, pinned))
        if kept:
            return kept.pop()
        return torch.empty(numel, dtype=dtype, pin_memory=pinned)

    def give_back(self, tensors: list[torch.Tensor]) -> None:
        """Keeps ``tensors`` (no longer used by anyone) for the next snapshot."""
        for tensor in tensors:
            self._free.setdefault((tensor.dtype, tensor.numel(), tensor.is_pinned()), []).append(tensor)

    def clear(self) -> None:
        self._free.clear()


class _Copier:
    """Copies one snapshot; remembers each tensor so that shared tensors stay shared in the copy."""

    def __init__(self, buffers: HostBuffers | None = None) -> None:
        self._copies: dict[tuple[Any, ...], torch.Tensor] = {}
        self.from_device = False
        self._buffers = buffers
        self.allocated: list[torch.Tensor] = []  # the flat buffers behind the copies

    def tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        key = tensor_identity(tensor)
        copied = self._copies.get(key)
        if copied is None:
            tensor = tensor.detach()
            if tensor.layout != torch.strided:  # sparse and other layouts: a plain copy, not kept
                copied = self._copies[key] = tensor.to("cpu", copy=True)
                return copied
            on_device = tensor.device.type != "cpu"
            self.from_device |= on_device
            if self._buffers is None:
                flat = torch.empty(tensor.numel(), dtype=tensor.dtype)
            else:
                # Page-locked host memory lets a device copy run without a staging buffer.
                pinned = on_device and torch.cuda.is_available()
                flat = self._buffers.take(tensor.dtype, tensor.numel(), pinned)
            self.allocated.append(flat)
            copied = flat.view(tensor.shape).copy_(tensor, non_blocking=on_device)
            self._copies[key] = copied
        return copied

    def value(self, value: Any) -> Any:
        return map_leaves(value, self._leaf)

    def _leaf(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, _IMMUTABLE):
            return value
        return copy.deepcopy(value)

    def finish(self) -> None:
        if self.from_device and torch.cuda.is_available():
            torch.cuda.synchronize()  # the non-blocking copies above must land before training goes on


def host_copy(value: Any) -> Any:
    """A copy of ``value`` (nested containers of tensors and plain values) in host memory."""
    copier = _Copier()
    out = copier.value(value)
    copier.finish()
    return out


def snapshot_objects(
    *,
    buffers: HostBuffers | None = None,
    models_state_dicts: Sequence[Any],
    optimizers: Sequence[Any],
    schedulers: Sequence[Any],
    dataloaders: Sequence[Any],
    scaler: Any,
    custom_objects: Sequence[Any],
) -> dict[str, Any]:
    """``save_training_state``'s object arguments, each replaced by a frozen host copy of its state.

    One copier serves the whole snapshot, so a tensor that appears in two places (a model's weight
    and a registered object holding it) is copied once. With ``buffers`` the copies reuse kept
    memory; the flat tensors behind them are returned under ``"host_buffers"`` so the caller can
    give them back once the snapshot is written (buffers this snapshot did not need are dropped).
    """
    copier = _Copier(buffers)

    def freeze(obj: Any) -> FrozenState:
        return FrozenState(copier.value(obj.state_dict()))

    frozen = {
        "models_state_dicts": [copier.value(sd) for sd in models_state_dicts],
        "optimizers": [freeze(o) for o in optimizers],
        "schedulers": [freeze(s) for s in schedulers],
        "dataloaders": [
            freeze(d) if callable(getattr(d, "state_dict", None)) else _NoState() for d in dataloaders
        ],
        "scaler": freeze(scaler) if scaler is not None else None,
        "custom_objects": [freeze(o) for o in custom_objects],
    }
    copier.finish()
    if buffers is not None:
        buffers.clear()  # no more than one copy of the state stays allocated
    frozen["host_buffers"] = copier.allocated
    return frozen
