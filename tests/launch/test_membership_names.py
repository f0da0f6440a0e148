"""The node names of the membership log travel through the rendezvous store (public Store API).

Each node's agent writes its own name under its group rank and reads the others'; a name that never
arrives (its node died right after the round formed) shows as ``#RANK``, and a store that fails
gives every node its rank, so the log never stops the group.
"""

from __future__ import annotations

import threading
from typing import Any

import torch.distributed as dist

from accelerate.launch.elastic import exchange_node_names, this_node


def test_every_node_reads_every_name_by_group_rank() -> None:
    store = dist.HashStore()
    results: dict[int, list[str]] = {}

    def node(rank: int) -> None:
        results[rank] = exchange_node_names(store, rank, 2, f"host{rank}:{100 + rank}")

    threads = [threading.Thread(target=node, args=(rank,)) for rank in (1, 0)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == {0: ["host0:100", "host1:101"], 1: ["host0:100", "host1:101"]}


def test_a_name_that_never_arrives_shows_as_its_rank() -> None:
    store = dist.HashStore()
    assert exchange_node_names(store, 0, 2, "a:1", timeout_s=0.05) == ["a:1", "#1"]


class BrokenStore:
    """A store whose every call fails (a connection lost while the names are exchanged)."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("connection reset")

        return fail


def test_a_failing_store_numbers_the_nodes() -> None:
    assert exchange_node_names(BrokenStore(), 1, 3, "b:2", timeout_s=0.05) == ["#0", "#1", "#2"]


def test_this_node_is_host_and_launcher_pid() -> None:
    import os
    import socket

    assert this_node() == f"{socket.gethostname()}:{os.getpid()}"


class CountingStore:
    """A store that takes the write and the wait, then fails every read, counting the calls."""

    def __init__(self) -> None:
        self.reads = 0

    def set(self, key: str, value: str) -> None:
        pass

    def wait(self, keys: list[str], timeout: Any) -> None:
        pass

    def check(self, keys: list[str]) -> bool:
        self.reads += 1
        raise RuntimeError("the store's host is unreachable")


def test_a_store_that_fails_a_read_is_not_asked_again() -> None:
    # Each call to an unreachable store may wait the store's timeout; one failure is enough to know.
    store = CountingStore()
    assert exchange_node_names(store, 0, 4, "a:1") == ["#0", "#1", "#2", "#3"]
    assert store.reads == 1
