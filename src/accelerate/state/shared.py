"""Small pieces of upstream's state interface that clients reach for directly.

``PartialState._shared_state`` / ``AcceleratorState._shared_state`` (a dict that is empty until the
state exists: transformers tests ``PartialState._shared_state == {}``), ``_reset_state``,
``fork_launched``, ``set_device``, and the module-level ``ThreadLocalSharedDict``, ``do_nothing`` and
``is_initialized``. Our states are one object per process; these read that object, they hold none.
"""

from __future__ import annotations

import multiprocessing
import threading
import weakref
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import torch


class SharedStateView:
    """Class attribute ``_shared_state``: the live state's attributes, or ``{}`` before it exists.

    A descriptor, so ``PartialState._shared_state`` works on the class as upstream's does; it reads
    the current per-process object through ``current`` each time (a reset empties it at once).
    """

    def __init__(
        self, current: Callable[[], Any], attributes: Callable[[Any], dict[str, Any]] | None = None
    ) -> None:
        self._current = current
        # A state whose attributes are not all in its __dict__ (AcceleratorState reads its run's
        # description) says which it has; the others are their __dict__ itself, as upstream's.
        self._attributes = attributes

    def __get__(self, obj: Any, owner: type | None = None) -> dict[str, Any]:
        state = self._current()
        if state is None or not getattr(state, "_initialized", False):
            return {}
        if self._attributes is not None:
            return self._attributes(state)
        shared: dict[str, Any] = state.__dict__  # the state is reached through an untyped callable
        return shared


# Set on a state object that _reset_state() emptied. Upstream's states are views of one shared dict:
# a reset clears it, so a reference held across the reset answers nothing until a new state exists,
# and then answers for the new one. Ours keep that: a reset empties the held object and marks it, and
# the next state of its class lends it its attribute dict (`adopt_held`), so an older Accelerator
# (transformers' first Trainer after a second was built) reads the process's current state.
_RESET_MARK = "_was_reset"
_HELD: dict[type, weakref.WeakSet[Any]] = {}


def mark_reset(state: Any) -> None:
    """Empties a state object a reset let go of; it says it was reset until the next state exists."""
    state.__dict__.clear()
    state.__dict__[_RESET_MARK] = True
    _HELD.setdefault(type(state), weakref.WeakSet()).add(state)


def adopt_held(state: Any) -> None:
    """Makes every reset object of ``state``'s class a view of ``state`` (one attribute dict, as upstream's)."""
    for held in list(_HELD.get(type(state), ())):
        if held is not state:
            held.__dict__ = state.__dict__


def was_reset(state: Any) -> bool:
    return bool(state.__dict__.get(_RESET_MARK, False))


def do_nothing(*args: Any, **kwargs: Any) -> None:
    """Accepts anything and returns None: a placeholder where a callback is required."""
    return None


def is_initialized() -> bool:
    """True once an ``AcceleratorState`` exists in this process (an ``Accelerator`` was created)."""
    from accelerate.state import accelerator_state

    state = accelerator_state._ACCEL_STATE
    return state is not None and bool(state._initialized)


def fork_launched() -> bool:
    """True in a process that a launcher started by ``fork`` (``notebook_launcher``/``debug_launcher``)."""
    if multiprocessing.parent_process() is None:
        return False
    # Each context's Process class names its start method; the running process is one of them.
    return getattr(multiprocessing.current_process(), "_start_method", None) == "fork"


def set_device(device: torch.device) -> None:
    """Makes ``device`` the current device of its backend (CUDA, XPU, ...); nothing to do on CPU/MPS."""
    if device.type == "cpu" or device.type == "mps":
        return
    module = getattr(torch, device.type, None)
    setter = getattr(module, "set_device", None)
    if setter is None:
        raise ValueError(
            f"set_device: torch has no torch.{device.type}.set_device, so {device} cannot be made current. "
            "Create the state with cpu=True, or on a device type torch can select."
        )
    setter(device)


class ThreadLocalSharedDict(MutableMapping[str, Any]):
    """A dict that is either shared by every thread or, with ``thread_local=True``, private to each.

    Upstream keeps per-thread state this way where several threads drive devices (TPU); here it is
    a plain, working mapping with that switch.

    Example:
        >>> shared = ThreadLocalSharedDict(thread_local=True)
        >>> shared["rank"] = 0  # seen by this thread only
    """

    def __init__(self, thread_local: bool = False) -> None:
        self._thread_local = thread_local
        self._local = threading.local()
        self._shared: dict[str, Any] = {}

    @property
    def _storage(self) -> dict[str, Any]:
        if not self._thread_local:
            return self._shared
        storage: dict[str, Any] | None = getattr(self._local, "storage", None)
        if storage is None:
            storage = self._local.storage = {}
        return storage

    def __getitem__(self, key: str) -> Any:
        return self._storage[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._storage[key] = value

    def __delitem__(self, key: str) -> None:
        del self._storage[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._storage)

    def __len__(self) -> int:
        return len(self._storage)

    def __repr__(self) -> str:
        return f"ThreadLocalSharedDict({self._storage!r}, thread_local={self._thread_local})"


def _shared_dict_type() -> type:
    # With torch_xla several threads may drive devices, so the mapping must be able to be per-thread.
    from accelerate.utils.imports import is_torch_xla_available

    return ThreadLocalSharedDict if is_torch_xla_available() else dict


SharedDict: type = _shared_dict_type()
"""The mapping type upstream's states keep shared attributes in: ``dict``, or
:class:`ThreadLocalSharedDict` where torch_xla is installed."""
