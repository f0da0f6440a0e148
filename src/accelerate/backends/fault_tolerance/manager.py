"""Building torchft's Manager for one replica group, every server bound to the user's address.

torchft 0.2.0's ``Manager`` hard-codes its quorum server's bind address to ``[::]`` (all
interfaces) and heals over pickles by default. Here the manager server is created with the
address from ``FaultToleranceKwargs.bind_address`` (by handing ``Manager`` a server factory that
rewrites only the bind argument while it is built), the gloo group's sockets are opened on that
address, and healing goes through ``TensorTransport``. The quorum is synchronous: the async quorum
thread would read the state dict while the forward runs (it crashes FSDP2; it is never needed
here since a group heals between steps).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torchft.manager as torchft_manager
from torchft.manager import Manager
from torchft.process_group import ProcessGroupGloo

from accelerate.backends.fault_tolerance.transport import TensorTransport
from accelerate.utils.fault_tolerance import FaultToleranceKwargs

_PATCH_LOCK = threading.Lock()


class GroupSizeMismatch(ValueError):
    """Replica groups of different sizes met in a quorum (each process pairs with its same-rank peers)."""


class BoundGloo(ProcessGroupGloo):  # type: ignore[misc]
    """torchft's reconfigurable gloo group whose sockets listen on ``host`` only."""

    def __init__(self, host: str, timeout: timedelta, layout: str = "DDP (any size)") -> None:
        super().__init__(timeout=timeout)
        self._host = host
        self._layout = layout

    def _create_pg(self, store: Any, rank: int, world_size: int) -> Any:
        if self._group_rank == 0:
            _check_group_sizes(store, rank, world_size, self._layout)
        options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
        options._timeout = self._timeout
        options._devices = [dist.ProcessGroupGloo.create_device(hostname=self._host)]
        backend = dist.ProcessGroupGloo(store, rank, world_size, options)
        backend._set_sequence_number_for_group()
        pg = dist.ProcessGroup(store, rank, world_size)
        pg._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
        pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, backend)
        return pg


def _check_group_sizes(store: Any, rank: int, world_size: int, layout: str) -> None:
    """Every group of the quorum has the same ``layout``, or ``GroupSizeMismatch``.

    A DDP group meets the others as one process (its rank 0 speaks for it, ``group.py``), so DDP
    groups of any sizes match. An FSDP2 group's processes each hold their own shard and pair with
    the same-rank process of every other group (torchft's per-rank model: the gloo group of rank
    ``r`` lives under ``.../torchft/{quorum_id}/{r}``), so FSDP2 groups must all have the same size
    and cannot meet DDP ones: a process with no same-rank peer would wait for it until the timeout.
    The groups' rank-0 processes (which every group has) compare layouts through the quorum's store
    first, so the run fails naming the cause.
    """
    store.set(f"accelerate_group_layout/{rank}", layout)
    layouts = [store.get(f"accelerate_group_layout/{peer}").decode() for peer in range(world_size)]
    if any(other != layout for other in layouts):
        raise GroupSizeMismatch(
            f"fault tolerance: the replica groups of this quorum are {layouts} (by replica rank). FSDP2 "
            "replica groups hold their shards cut by their size, so every replica group must have the same "
            "number of processes when FSDP2 runs inside them (launch each with the same --num_processes), "
            "and all groups must run FSDP2 or all DDP (DDP groups may differ in size)."
        )


@contextmanager
def _manager_server_bound_to(host: str) -> Iterator[None]:
    """While the Manager is built, its ManagerServer listens on ``host`` instead of ``[::]``."""
    original = torchft_manager.ManagerServer

    def bound(**kwargs: Any) -> Any:
        port = str(kwargs["bind"]).rsplit(":", 1)[-1]
        kwargs["bind"] = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return original(**kwargs)

    with _PATCH_LOCK:
        torchft_manager.ManagerServer = bound
        try:
            yield
        finally:
            torchft_manager.ManagerServer = original


def bound_store(host: str) -> Any:
    """The replica group's rendezvous ``TCPStore``, listening on ``host`` only.

    torch's TCPStore master listens on every interface; handed a socket we bound (``master_listen_fd``)
    it listens where we say. The socket's descriptor is handed over (detached): the store owns it.
    """
    family, _, _, _, address = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(128)
    port = int(listener.getsockname()[1])
    return dist.TCPStore(
        host, port, is_master=True, wait_for_workers=False, master_listen_fd=listener.detach(), use_libuv=True
    )


def build_manager(
    settings: FaultToleranceKwargs,
    *,
    state_dict: Callable[[], Any],
    load_state_dict: Callable[[Any], None],
    store_port: int,
    group_rank: int = 0,
    group_size: int = 1,
    layout: str = "DDP (any size)",
) -> tuple[Manager, TensorTransport]:
    """The manager of one process of a replica group, its healing transport, the state functions registered.

    ``store_port`` is a TCPStore this group's processes share (the group's rendezvous, on
    ``bind_address``: group rank 0's manager publishes its server's address there, and torchft
    keeps each quorum's keys under a prefix of the quorum leader's store). In an FSDP2 group of
    several processes every one has its own manager client (``group_rank`` of ``group_size``);
    rank 0's runs the group's quorum server, which asks the lighthouse once all of them ask it, and
    each rank's gloo group joins the same-rank processes of the other groups (torchft's per-rank
    model). A DDP group builds one manager, on its rank 0, as a group of one (``group.py``).
    ``layout`` names the group's kind for the check that the groups of a quorum can meet.
    """
    timeout = timedelta(seconds=settings.timeout_s)
    pg = BoundGloo(settings.bind_address, timeout, layout)
    transport = TensorTransport(pg, timeout)
    with _manager_server_bound_to(settings.bind_address):
        manager = Manager(
            pg=pg,
            load_state_dict=None,
            state_dict=None,
            min_replica_size=settings.min_replicas,
            use_async_quorum=False,
            timeout=timeout,
            quorum_timeout=timedelta(seconds=settings.quorum_timeout_s),
            connect_timeout=timeout,
            rank=group_rank,
            world_size=group_size,
            store_addr=settings.bind_address,
            store_port=store_port,
            lighthouse_addr=settings.lighthouse_url,
            # torchft reads the trailing digits as the group's number
            replica_id=f"accelerate_group_{settings.replica_group_id}",
            port=0,
            hostname=settings.bind_address,
            heartbeat_interval=timedelta(milliseconds=settings.heartbeat_ms),
            checkpoint_transport=transport,
            init_sync=True,  # step 0 copies the leader's weights: every group starts equal
        )
    manager.register_state_dict_fn("accelerate", load_state_dict, state_dict)
    return manager, transport


def start_lighthouse(
    bind: str = "127.0.0.1:0",
    *,
    min_replicas: int = 1,
    join_timeout_ms: int = 100,
    heartbeat_timeout_ms: int = 1000,
    quorum_tick_ms: int = 20,
) -> Any:
    """Starts torchft's lighthouse (the quorum server) listening on ``bind`` (``host:port``).

    Returns the server (``.address()`` is what ``FaultToleranceKwargs(lighthouse_address=...)``
    takes; ``.shutdown()`` stops it). A group that misses heartbeats for ``heartbeat_timeout_ms``
    leaves the next quorum.
    """
    from torchft.coordination import LighthouseServer

    return LighthouseServer(
        bind=bind,
        min_replicas=min_replicas,
        join_timeout_ms=join_timeout_ms,
        quorum_tick_ms=quorum_tick_ms,
        heartbeat_timeout_ms=heartbeat_timeout_ms,
    )


def lighthouse_address(server: Any, host: str) -> str:
    """``host:port`` of a started lighthouse (its ``address()`` names the machine, not the bound address)."""
    port = str(server.address()).rsplit(":", 1)[-1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
