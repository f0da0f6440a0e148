"""Creating (or adopting) the default ``torch.distributed`` process group, and destroying our own.

``PartialState`` asks for a group with :func:`init_or_adopt`. When none exists it creates one with
the requested backend, timeout and init_method. When one exists already (the user, or an earlier
``PartialState`` before a state reset, made it) it is used as it is: a live group cannot change
its backend or how it connected, so every requested setting it does not have is named in one
warning, once per process. Either way the caller gets the group's real backend.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from accelerate.state import teardown
from accelerate.state.environment import ClusterEnvironment
from accelerate.utils.records import frozen_record


# Frozen records, not dataclasses: every PartialState() loads this module, and a dataclass compiles
# its methods when created (see accelerate.utils.records).
@frozen_record
class GroupRequest:
    """What the caller asked for; ``None`` means "no preference" (torch's or accelerate's default)."""

    backend: str | None = None
    timeout: timedelta | None = None
    init_method: str | None = None


# Every group accelerate created in this process, held until exit, and the settings of the latest.
#
# Holding them is deliberate. A group's C++ destructor joins gloo's worker threads, and a worker
# finishing a collective may need the GIL: if the destructor ran under the GIL (when a
# DistributedDataParallel wrapper freed in ordinary code held the last reference), the process
# would deadlock. With these references the last one is always ours, dropped at exit from
# Python, where the destructor runs with the GIL released.
_OWN_GROUPS: list[Any] = []
# The timeout of a group accelerate creates when none was asked for (InitProcessGroupKwargs(timeout=)).
# torch's gloo default (30 min) leaves a hung CPU job silent for half an hour; 10 minutes is torch's
# NCCL default, so both backends now report a hang (accelerate.diagnostics.watchdog) within 10 minutes.
DEFAULT_TIMEOUT = timedelta(minutes=10)
_OWN_REQUEST = GroupRequest()
_WARNED: set[str] = set()
_LOCK = threading.Lock()


def init_or_adopt(env: ClusterEnvironment, request: GroupRequest, default_backend: str) -> str:
    """Makes sure the default group exists and returns its real backend (``dist.get_backend()``)."""
    if dist.is_initialized():
        _report_ignored(request)
    else:
        _create(env, request, default_backend)
    teardown.install_exit_handler(finish_own_groups)
    return str(dist.get_backend())


def _create(env: ClusterEnvironment, request: GroupRequest, default_backend: str) -> None:
    global _OWN_REQUEST
    # torch.distributed.nn.functional binds the default group as a default argument when it is
    # first imported, and DistributedDataParallel imports it: imported after the group exists, it
    # would pin the group (and gloo's worker threads) until the interpreter finalises, which is
    # what made runs abort at exit. Imported now, its defaults are None.
    with contextlib.suppress(ImportError):
        import torch.distributed.nn.functional  # noqa: F401
    kwargs: dict[str, Any] = {
        "backend": request.backend or default_backend,
        "world_size": env.world_size,
        "rank": env.rank,
    }
    kwargs["timeout"] = request.timeout if request.timeout is not None else DEFAULT_TIMEOUT
    if request.init_method is not None:
        kwargs["init_method"] = request.init_method
    elif env.source == "torchrun":
        store = _restart_store(env, request.timeout)
        if store is None:
            kwargs["init_method"] = "env://"
        else:
            kwargs["store"] = store
    else:
        kwargs["init_method"] = f"tcp://{env.master_addr}:{env.master_port}"
    # A destroyed group of ours that nothing uses any more goes first: its store may still hold
    # the port the new group is about to bind.
    release_unused_groups()
    dist.init_process_group(**kwargs)
    with _LOCK:
        _OWN_GROUPS.append(dist.group.WORLD)
        _OWN_REQUEST = request


def _restart_store(env: ClusterEnvironment, timeout: timedelta | None) -> Any:
    """The agent's store under a per-attempt prefix, for processes that torchrun restarted.

    torch.distributed.run keeps one store for the whole job, and env:// reuses the same keys in every
    attempt, so a restarted process can read the address a process of the failed attempt published and
    fail connecting to it ("Gloo connectFullMesh failed ... Connection refused"). A prefix per attempt
    keeps each attempt's keys apart. ``None`` on the first attempt (plain env://, as torch does).
    """
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if attempt in ("", "0") or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    store = dist.TCPStore(
        env.master_addr,
        env.master_port,
        world_size=env.world_size,
        is_master=False,
        timeout=timeout or timedelta(minutes=30),
    )
    return dist.PrefixStore(f"accelerate/attempt_{attempt}", store)


def is_own_group() -> bool:
    """Whether the current default group is one accelerate created in this process."""
    if not (dist.is_available() and dist.is_initialized()):
        return False
    return any(group is dist.group.WORLD for group in _OWN_GROUPS)


def finish_own_groups() -> None:
    """At exit: destroys the default group if accelerate created it, then lets its groups go.

    A group the user created is left to the user. Dropping the last reference to one of ours
    runs its destructor here, which joins gloo's worker threads with the GIL released.
    """
    if is_own_group():
        dist.destroy_process_group()
    with _LOCK:
        groups = list(_OWN_GROUPS)
        _OWN_GROUPS.clear()
    while groups:
        groups.pop()  # no other reference is left here: each destructor runs on this pop


def release_unused_groups() -> None:
    """Lets go of the groups accelerate created that are destroyed and referenced by nothing else.

    Dropping our reference is only safe when it is the last one: the destructor then runs here,
    from Python, with the GIL released. A group still held elsewhere (a live, or not yet
    collected, DDP wrapper) stays held until exit.
    """
    with _LOCK:
        candidates = [g for g in _OWN_GROUPS if not (dist.is_initialized() and g is dist.group.WORLD)]
        for group in candidates:
            _OWN_GROUPS.remove(group)
    while candidates:
        group = candidates.pop()
        # References: `group` and getrefcount's argument. Any more, and someone else holds it.
        if sys.getrefcount(group) > 2:
            with _LOCK:
                _OWN_GROUPS.append(group)
        del group  # the last reference when it was not kept: the destructor runs here


def _group_timeout() -> timedelta | None:
    """The default group's timeout, where torch exposes it (best effort: None when it does not)."""
    try:
        backend = dist.group.WORLD._get_backend(torch.device("cpu"))  # type: ignore[union-attr]
        timeout = backend.options._timeout
    except Exception:  # noqa: BLE001 - private API; not knowing only makes the report less precise
        return None
    return timeout if isinstance(timeout, timedelta) else None


def group_timeout(request: GroupRequest) -> timedelta:
    """The default group's timeout: the one accelerate created it with, else torch's, else ours."""
    if is_own_group():
        return _OWN_REQUEST.timeout or DEFAULT_TIMEOUT
    return _group_timeout() or request.timeout or DEFAULT_TIMEOUT


def ignored_settings(request: GroupRequest) -> list[str]:
    """The requested settings the existing default group does not have, each with the reason."""
    own = is_own_group()
    real_backend = str(dist.get_backend())
    ignored: list[str] = []
    if request.backend is not None and request.backend != real_backend:
        ignored.append(f"backend={request.backend!r} (the group uses {real_backend!r})")
    if request.timeout is not None:
        actual = (_OWN_REQUEST.timeout if own else None) or _group_timeout()
        if actual is None or actual != request.timeout:
            known = f"its timeout is {actual}" if actual is not None else "its timeout cannot be changed"
            ignored.append(f"timeout={request.timeout} ({known})")
    if request.init_method is not None and not (own and _OWN_REQUEST.init_method == request.init_method):
        ignored.append(f"init_method={request.init_method!r} (the group is already connected)")
    return ignored


def _report_ignored(request: GroupRequest) -> None:
    ignored = ignored_settings(request)
    if not ignored:
        return
    message = (
        f"PartialState: a torch.distributed process group already exists (backend {dist.get_backend()!r}), "
        f"so it is used as it is and these requested settings were ignored: {'; '.join(ignored)}. "
        "To have them applied, let accelerate create the group (do not call init_process_group "
        "yourself first), or request the settings the group has."
    )
    with _LOCK:
        if message in _WARNED:
            return
        _WARNED.add(message)
    warnings.warn(message, UserWarning, stacklevel=4)


@frozen_record
class GroupSpec:
    """What it takes to create the default group again: its settings and the store it met on."""

    backend: str
    rank: int
    world_size: int
    timeout: timedelta
    store: Any


def close_default_group() -> GroupSpec:
    """Destroys the default group so that peers blocked in one of its collectives fail at once.

    A collective a peer waits in only fails before the group's timeout when this process's side of
    its connections closes, which happens when the C++ group is freed: so the wrappers accelerate
    registered (DDP) drop their references and so does accelerate. A reference held elsewhere (a
    wrapper the user built) keeps the connections open, and the peers' collective then fails at the
    group's timeout instead. Returns what :func:`reopen_default_group` needs.
    """
    spec = GroupSpec(
        backend=str(dist.get_backend()),
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        timeout=group_timeout(GroupRequest()),
        store=dist.distributed_c10d._get_default_store(),
    )
    was_own = is_own_group()
    teardown.release_holders()
    dist.destroy_process_group()
    if was_own:
        release_unused_groups()  # frees it unless something else still holds it
    return spec


def reopen_default_group(spec: GroupSpec, prefix: str) -> None:
    """Creates the default group again, meeting on ``spec.store`` under ``prefix`` (the same on every rank).

    The new group is accelerate's (destroyed at exit) and has the old one's backend and timeout.
    """
    release_unused_groups()
    dist.init_process_group(
        backend=spec.backend,
        store=dist.PrefixStore(prefix, spec.store),
        rank=spec.rank,
        world_size=spec.world_size,
        timeout=spec.timeout,
    )
    global _OWN_REQUEST
    with _LOCK:
        _OWN_GROUPS.append(dist.group.WORLD)
        _OWN_REQUEST = GroupRequest(backend=spec.backend, timeout=spec.timeout)
    teardown.install_exit_handler(finish_own_groups)
