"""Device tensors of one save copied to pinned host memory ahead of their writers (CUDA only).

Without this, a file's device tensors reach the host one at a time inside its writer (a blocking
copy into pageable memory, then the write, then the next copy). Here every copy of a save is queued
at once on a side stream, into page-locked memory, non-blocking, in the order the files are written;
each writer waits only for the copies of the tensor it is about to write (``ready``) or of the
object it is about to serialise (``wait_for``), so later copies run while earlier bytes are written.

Two ways to stage, matching what the writers did with device tensors before:

* :meth:`HostStaging.weights`: a model's state dict for a weights file: one compact host tensor
  per distinct tensor (tied tensors stay one), as ``prepare_state_dict`` made with ``.to("cpu")``.
* :meth:`HostStaging.stage`: anything ``torch.save`` writes (optimizer states, ...): one host copy
  per storage, the tensors rebuilt as the same views of it, and the file records each storage's
  original device (``cuda:0``) as ``torch.save`` of the device tensor would, so the bytes of the
  file are unchanged and ``torch.load`` without ``map_location`` still puts them back on the device.

Pinned memory comes from torch's caching host allocator: after a save it stays cached for the next
one (pinning fresh memory costs about as much as the copy it speeds up), and torch offers no public
call to give it back. So one save pins at most ``PINNED_BUDGET_BYTES``; the copies past it land in
ordinary pageable memory (the copy then blocks, as every copy did before), which a big model's
optimizer states would otherwise hold page-locked for the rest of the process. Without CUDA, or for
a state with no CUDA tensor, both return their argument unchanged and nothing else happens.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import torch

from accelerate.storage.model_files import tensor_identity
from accelerate.storage.state_tree import map_leaves

__all__ = ["HostStaging"]

# host storage's data_ptr -> the location tag of the device storage it copies, while its save runs.
_ORIGINS: dict[int, str] = {}
_ORIGINS_LOCK = threading.Lock()
_REGISTERED = False
# Before torch's own taggers (cpu is 10, cuda 20): a staged host storage reports its device.
_TAG_PRIORITY = 1
# Page-locked bytes one save may take from the caching host allocator (kept cached afterwards).
PINNED_BUDGET_BYTES = 1 << 30


def _origin_tag(storage: Any) -> str | None:
    if getattr(storage, "device", None) is None or storage.device.type != "cpu":
        return None
    return _ORIGINS.get(storage.data_ptr())


def _never_restores(obj: Any, location: str) -> None:
    """Loading is torch's own (a staged storage's tag is a plain ``cuda:N``): never claims one."""
    return None


def _register_tagger() -> None:
    global _REGISTERED
    with _ORIGINS_LOCK:
        if not _REGISTERED:
            torch.serialization.register_package(_TAG_PRIORITY, _origin_tag, _never_restores)
            _REGISTERED = True


class HostStaging:
    """The host copies of one save; :meth:`close` (or leaving the ``with`` block) waits for them all."""

    def __init__(self) -> None:
        self._by_storage: dict[tuple[Any, int], torch.UntypedStorage] = {}
        self._by_tensor: dict[tuple[Any, ...], torch.Tensor] = {}
        self._events: dict[int, Any] = {}  # host data_ptr -> the CUDA event after its copy
        self._sources: list[Any] = []  # device storages kept alive until their copies landed
        self._origins: list[int] = []
        self._stream: Any = None
        self._enabled = torch.cuda.is_available()
        self._pinned_bytes = 0  # taken from the budget so far

    # --- what is staged, and how (tests stage CPU tensors by overriding these) -------------------
    def _stages(self, tensor: torch.Tensor) -> bool:
        return self._enabled and tensor.device.type == "cuda" and tensor.layout == torch.strided

    def _origin(self, tensor: torch.Tensor) -> str | None:
        """The location tag ``torch.save`` would write for ``tensor``'s storage."""
        return f"cuda:{tensor.device.index}" if tensor.device.type == "cuda" else None

    def _pinned(self, nbytes: int) -> bool:
        """Whether the next ``nbytes`` of host copy can be page-locked within the save's budget."""
        if not self._enabled or self._pinned_bytes + nbytes > PINNED_BUDGET_BYTES:
            return False
        self._pinned_bytes += nbytes
        return True

    # --- staging ----------------------------------------------------------------------------------
    def weights(self, state_dict: Any) -> Any:
        """``state_dict`` with every staged tensor replaced by a compact host copy (ties stay tied)."""
        if not self._enabled:
            return state_dict
        out = copy.copy(state_dict)  # keeps the class (OrderedDict) and attributes such as _metadata
        for name, value in state_dict.items():
            if isinstance(value, torch.Tensor) and self._stages(value):
                out[name] = self._compact_copy(value)
        return out

    def stage(self, obj: Any) -> Any:
        """``obj`` (nested dicts, lists, tuples) with staged tensors as views of host storage copies."""
        if not self._enabled:
            return obj
        return map_leaves(obj, self._stage_leaf)

    def _stage_leaf(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and self._stages(value):
            return self._storage_view(value)
        return value

    def _compact_copy(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.detach()
        key = tensor_identity(tensor)
        host = self._by_tensor.get(key)
        if host is None:
            pinned = self._pinned(tensor.numel() * tensor.element_size())
            host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=pinned)
            self._copy(host, tensor)
            self._by_tensor[key] = host
        return host

    def _storage_view(self, tensor: torch.Tensor) -> torch.Tensor:
        source = tensor.detach().untyped_storage()
        if source.nbytes() == 0:
            return tensor  # nothing to copy; torch.save writes an empty record either way
        key = (tensor.device, source.data_ptr())
        host = self._by_storage.get(key)
        if host is None:
            flat = torch.empty(source.nbytes(), dtype=torch.uint8, pin_memory=self._pinned(source.nbytes()))
            self._copy(flat, torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(source))
            host = flat.untyped_storage()
            self._by_storage[key] = host
            origin = self._origin(tensor)
            if origin is not None:
                _register_tagger()
                with _ORIGINS_LOCK:
                    _ORIGINS[host.data_ptr()] = origin
                self._origins.append(host.data_ptr())
        view = torch.empty(0, dtype=tensor.dtype).set_(
            host, tensor.storage_offset(), tensor.size(), tensor.stride()
        )
        return view.requires_grad_(False)

    def _copy(self, host: torch.Tensor, source: torch.Tensor) -> None:
        if source.device.type != "cuda" or not host.is_pinned():
            # A pageable destination: a non-blocking copy would block anyway; copy now, no event.
            host.copy_(source)
            return
        if self._stream is None:
            self._stream = torch.cuda.Stream(device=source.device)  # type: ignore[no-untyped-call]
        # The copies follow whatever the caller's stream queued before (the step that made the state).
        self._stream.wait_stream(torch.cuda.current_stream(source.device))
        with torch.cuda.stream(self._stream):
            host.copy_(source, non_blocking=True)
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(self._stream)
        self._sources.append(source)
        self._events[host.untyped_storage().data_ptr()] = event

    # --- waiting ----------------------------------------------------------------------------------
    def ready(self, tensor: torch.Tensor) -> None:
        """Returns once ``tensor``'s host bytes have landed (at once for a tensor not staged here)."""
        event = self._events.get(tensor.untyped_storage().data_ptr()) if self._events else None
        if event is not None:
            event.synchronize()

    def wait_for(self, obj: Any) -> None:
        """:meth:`ready` for every tensor in ``obj`` (nested dicts, lists, tuples)."""
        if not self._events:
            return
        stack = [obj]
        while stack:
            item = stack.pop()
            if isinstance(item, torch.Tensor):
                self.ready(item)
            elif isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list | tuple):
                stack.extend(item)

    def close(self) -> None:
        """Waits for every copy, then forgets the staged storages' origins and the device sources."""
        for event in self._events.values():
            event.synchronize()
        with _ORIGINS_LOCK:
            for ptr in self._origins:
                _ORIGINS.pop(ptr, None)
        self._events.clear()
        self._sources.clear()
        self._origins.clear()
        self._by_storage.clear()
        self._by_tensor.clear()

    def __enter__(self) -> HostStaging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
