"""``FaultToleranceKwargs``: opting a run into fault-tolerant replica groups (torchft).

Our addition (upstream Accelerate has no fault tolerance): the run is split into replica groups
that average their gradients through torchft's manager; a group that dies is dropped from the
quorum while the others keep stepping, and comes back healed from a live peer. Pure data: nothing
here imports torch or torchft (the engine lives in ``accelerate.backends.fault_tolerance``).
"""

from __future__ import annotations

from dataclasses import dataclass

from accelerate.utils.dataclasses import KwargsHandler


@dataclass
class FaultToleranceKwargs(KwargsHandler):
    """Settings of a fault-tolerant run (one replica group per ``accelerate launch``).

    Args:
        replica_group_id: this group's number, ``0 <= id < num_replica_groups``; a restarted group
            keeps its number.
        num_replica_groups: how many groups the run starts with.
        lighthouse_address: ``host:port`` of torchft's lighthouse (the quorum server); start one
            with ``accelerate.backends.fault_tolerance.start_lighthouse`` or the launcher.
        bind_address: the address every server this process opens listens on (its quorum manager,
            its gloo sockets); loopback by default so nothing is reachable from outside.
        min_replicas: the fewest healthy groups a step commits with.
        heartbeat_ms: how often a group tells the lighthouse it is alive.
        timeout_s: how long a collective or a healing transfer may take before the step is skipped.
        quorum_timeout_s: how long a group waits for a quorum.
        data_seed: seeds the epoch's sample order, which every group must draw identically.

    Example:
        >>> Accelerator(kwargs_handlers=[FaultToleranceKwargs(replica_group_id=0, num_replica_groups=3,
        ...     lighthouse_address="127.0.0.1:29510")])
    """

    replica_group_id: int = 0
    num_replica_groups: int = 1
    lighthouse_address: str | None = None
    bind_address: str = "127.0.0.1"
    min_replicas: int = 1
    heartbeat_ms: int = 100
    timeout_s: float = 30.0
    quorum_timeout_s: float = 60.0
    data_seed: int = 0

    def __post_init__(self) -> None:
        if self.num_replica_groups < 1:
            raise ValueError(
                f"FaultToleranceKwargs(num_replica_groups={self.num_replica_groups}) must be at least 1."
            )
        if not 0 <= self.replica_group_id < self.num_replica_groups:
            raise ValueError(
                f"FaultToleranceKwargs(replica_group_id={self.replica_group_id}) must lie in "
                f"[0, num_replica_groups={self.num_replica_groups}); number the groups from 0."
            )
        if not 1 <= self.min_replicas <= self.num_replica_groups:
            raise ValueError(
                f"FaultToleranceKwargs(min_replicas={self.min_replicas}) must lie in "
                f"[1, num_replica_groups={self.num_replica_groups}]."
            )
        if self.heartbeat_ms <= 0 or self.timeout_s <= 0 or self.quorum_timeout_s <= 0:
            raise ValueError(
                "FaultToleranceKwargs(heartbeat_ms=..., timeout_s=..., quorum_timeout_s=...) must be positive; "
                f"got {self.heartbeat_ms}, {self.timeout_s}, {self.quorum_timeout_s}."
            )
        if not self.bind_address or "://" in self.bind_address:
            raise ValueError(
                f"FaultToleranceKwargs(bind_address={self.bind_address!r}) must be a bare host address "
                "(an IP or hostname such as 127.0.0.1), the interface the servers listen on."
            )

    @property
    def lighthouse_url(self) -> str:
        """The lighthouse address as torchft's clients take it (``http://host:port``)."""
        if not self.lighthouse_address:
            raise ValueError(
                "FaultToleranceKwargs(lighthouse_address=...) is not set: pass the address of a running "
                "lighthouse, or launch with `accelerate launch --fault_tolerance --ft_lighthouse HOST:PORT`."
            )
        address = self.lighthouse_address
        return address if "://" in address else f"http://{address}"
