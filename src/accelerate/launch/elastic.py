"""Elastic launches: ``--nnodes MIN:MAX`` (or ``--num_machines MIN:MAX``) and ``--rdzv_endpoint HOST:PORT``.

torch.distributed.run's elastic agent forms a group of any number of machines in ``MIN..MAX``; when
a machine leaves (dies, is preempted) or a new one waits to join, every agent stops its processes,
the rendezvous forms a new group, and the same script starts again in every process. The script
resumes with ``accelerator.load_state(missing_ok=True)``, which reshards the newest committed
checkpoint to the new world size (the data position included: see
:meth:`accelerate.data.base.PreparedLoaderMixin.load_state_dict`).

``num_processes`` stays the total over all machines *at the largest size* (upstream's meaning with
``num_machines``): each machine runs ``num_processes / MAX`` processes, whatever the group's size.

A checkpoint that cannot reshard to the new size (an iterable loader's mid-epoch position, a tensor
sized by the world) makes ``load_state`` raise before any object changes, naming the file or tensor
and both sizes. The agent counts that as a failure and restarts the group ``--max_restarts`` times,
each attempt failing the same way before its first step, then the launch exits with the error:
torch's agent offers no public way to refuse a restart, and a later round at the saved size (a node
rejoining) would load.

This module only turns the flags into settings and checks them; the agent does the rest.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from accelerate.config.env_contract import ELASTIC_MAX_PROCESSES_ENV
from accelerate.launch.checks import LaunchError

if TYPE_CHECKING:
    from accelerate.launch.plan import Setting

# The rendezvous backends that can form a group again with another membership.
ELASTIC_BACKENDS = ("c10d", "etcd", "etcd-v2")


def parse_range(value: Any, flag: str) -> tuple[int, int]:
    """``"N"`` -> (N, N); ``"MIN:MAX"`` -> (MIN, MAX). Raises naming ``flag`` on anything else."""
    text = str(value).strip()
    parts = text.split(":")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (1, 2):
        raise LaunchError(
            f"{flag} {text}: expected a number of machines N, or a range MIN:MAX (e.g. {flag} 1:4 lets the "
            "group run on 1 to 4 machines)."
        )
    low, high = numbers[0], numbers[-1]
    if low < 1:
        raise LaunchError(
            f"{flag} {text}: the smallest group must have at least 1 machine; use {flag} 1:{max(high, 1)}."
        )
    if low > high:
        raise LaunchError(
            f"{flag} {text}: MIN ({low}) is larger than MAX ({high}); write {flag} {high}:{low}."
        )
    return low, high


def normalise_machine_flags(flags: Mapping[str, Any]) -> dict[str, Any]:
    """Folds ``--nnodes`` / a ``MIN:MAX`` ``--num_machines`` / ``--rdzv_endpoint`` into the plan's settings.

    Afterwards ``num_machines`` is MAX (an int) and ``nnodes`` is ``"MIN:MAX"`` for an elastic range
    (absent for a fixed size); ``rdzv_endpoint`` becomes ``main_process_ip`` / ``main_process_port``.
    """
    out = dict(flags)
    given = {name: out[name] for name in ("nnodes", "num_machines") if out.get(name) is not None}
    ranges = {name: parse_range(value, f"--{name}") for name, value in given.items()}
    if len(set(ranges.values())) > 1:
        raise LaunchError(
            f"--nnodes {given['nnodes']} and --num_machines {given['num_machines']} disagree; give one of them."
        )
    out.pop("nnodes", None)
    if ranges:
        low, high = next(iter(ranges.values()))
        out["num_machines"] = high
        if low != high:
            out["nnodes"] = f"{low}:{high}"
    endpoint = out.pop("rdzv_endpoint", None)
    if endpoint is not None:
        host, sep, port = str(endpoint).rpartition(":")
        if not sep or not host or not port.isdigit():
            raise LaunchError(
                f"--rdzv_endpoint {endpoint}: expected HOST:PORT (e.g. --rdzv_endpoint 10.0.0.1:29400)."
            )
        for name, value in (("main_process_ip", host), ("main_process_port", int(port))):
            if out.get(name) is not None and str(out[name]) != str(value):
                raise LaunchError(
                    f"--rdzv_endpoint {endpoint} disagrees with --{name} {out[name]}; give one of them."
                )
            out[name] = value
    return out


def typed_flags(flags: Mapping[str, Any]) -> dict[str, str]:
    """The flag the user typed for each setting that another flag's spelling fills, for provenance.

    :func:`normalise_machine_flags` moves ``--nnodes`` into ``num_machines``, a ``--num_machines``
    range into ``nnodes`` and ``--rdzv_endpoint`` into ``main_process_ip`` / ``main_process_port``;
    the plan's sources (``--dry_run``, error messages) should name what was typed, not those settings.
    """
    given = {name for name, value in flags.items() if value is not None}
    out: dict[str, str] = {}
    if "nnodes" in given and "num_machines" not in given:
        out["num_machines"] = "--nnodes"
    if "num_machines" in given and "nnodes" not in given:
        out["nnodes"] = "--num_machines"
    if "rdzv_endpoint" in given:
        for name in ("main_process_ip", "main_process_port"):
            if name not in given:
                out[name] = "--rdzv_endpoint"
    return out


def check_elastic_rendezvous(settings: dict[str, Setting], notes: list[str]) -> None:
    """An elastic range needs a rendezvous that can re-form: c10d by default, static refused."""
    from accelerate.launch.plan import Setting

    nnodes = settings["nnodes"]
    if nnodes.value is None:
        return
    backend = settings["rdzv_backend"]
    if str(backend.value) in ELASTIC_BACKENDS:
        return
    if backend.source != "default":
        raise LaunchError(
            f"nnodes={nnodes.value} (from {nnodes.source}) is an elastic range, but rdzv_backend={backend.value} "
            f"(from {backend.source}) forms the group once, at a fixed size. Use --rdzv_backend c10d "
            f"(or leave it out), or a fixed --nnodes {str(nnodes.value).split(':')[1]}."
        )
    settings["rdzv_backend"] = Setting("rdzv_backend", "c10d", "default (c10d: an elastic --nnodes needs it)")
    notes.append("rdzv_backend: c10d, since the static rendezvous cannot re-form the group at another size.")


def endpoint_note(settings: Mapping[str, Setting]) -> str | None:
    """For an elastic launch: the rendezvous endpoint and where its address and port came from.

    The endpoint hosts the c10d store every node joins; when it is a node of the group (the Slurm
    rule's first host, say), losing that node ends the whole job, so the note says so.
    """
    if settings["nnodes"].value is None:
        return None
    ip, port = settings["main_process_ip"], settings["main_process_port"]
    where = f"address from {ip.source}; port from {port.source}"
    if ip.source == port.source:
        where = f"from {ip.source}"
    note = f"rdzv_endpoint: {ip.value}:{port.value} ({where})."
    if ip.source.startswith("slurm:"):
        note += (
            " That node hosts the rendezvous store: the group survives losing any other node, not that one "
            "(pass --rdzv_endpoint HOST:PORT on a host that stays up to survive it too)."
        )
    return note


def nnodes_arg(settings: dict[str, Setting]) -> str:
    """torch.distributed.run's ``--nnodes``: the range when elastic, else the fixed count."""
    nnodes = settings["nnodes"].value
    return str(nnodes) if nnodes is not None else str(settings["num_machines"].value)


# torch (2.5+) shares the rendezvous TCPStore with the workers, and a node caches where that store
# is after its first round; a node that joins a later round then waits forever for an address the
# first node never writes again (torch.distributed.elastic.rendezvous.dynamic_rendezvous). Without
# the sharing, every round publishes the address afresh.
_NO_SHARED_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def elastic_agent_env(settings: Mapping[str, Setting], environ: Mapping[str, str]) -> dict[str, str]:
    """Variables the agent and the processes of an elastic launch need (the user's own setting wins).

    The processes learn the largest group's size (``GradientAccumulationPlugin(adjust_for_world_size=
    True)`` keeps the global batch of that size).
    """
    if settings["nnodes"].value is None:
        return {}
    out = {ELASTIC_MAX_PROCESSES_ENV: str(settings["num_processes"].value)}
    if _NO_SHARED_STORE not in environ:
        out[_NO_SHARED_STORE] = "1"
    return out


class MembershipLog:
    """The group's membership changes as this node's agent sees them, for the console and the summary.

    The agent calls :meth:`formed` after every rendezvous with the participating nodes (as
    ``host:launcher pid``, see :func:`exchange_node_names`) and the number of processes; a change from the previous group is one
    event: one line per node that left or joined, each with the old and the new world size.
    """

    def __init__(self) -> None:
        self.events: list[str] = []
        self._nodes: list[str] | None = None
        self._world: int | None = None

    def formed(self, nodes: list[str], world_size: int) -> list[str]:
        """Records a new group; returns the lines to print (none for the first group or no change)."""
        before, old_world = self._nodes, self._world
        self._nodes, self._world = nodes, world_size
        if before is None or old_world is None:
            return []
        left = [n for n in before if n not in nodes]
        joined = [n for n in nodes if n not in before]
        change = f"world size {old_world} -> {world_size}"
        lines = [f"node {n} left; {change}" for n in left] + [f"node {n} joined; {change}" for n in joined]
        if not lines and old_world != world_size:
            lines = [f"the group re-formed; {change}"]
        self.events += lines
        return lines

    def summary(self) -> str:
        """The run's membership changes, for the end of the launch (empty when there was none)."""
        if not self.events:
            return ""
        body = "\n".join(f"  {i}. {event}" for i, event in enumerate(self.events, 1))
        return f"accelerate launch: membership changes during the run ({len(self.events)}):\n{body}"


# Where each node's agent publishes its name in the rendezvous store. torch gives every round of a
# c10d/etcd rendezvous its own key prefix, so a round never reads the names of an earlier one.
_NAME_KEY = "accelerate/membership/node/"
NAME_TIMEOUT_S = 10.0


def this_node() -> str:
    """This node's name in the membership log: its host and its launcher's pid (a replacement
    launcher on the same host is another node)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def exchange_node_names(
    store: Any, group_rank: int, group_world_size: int, name: str, timeout_s: float = NAME_TIMEOUT_S
) -> list[str]:
    """Every node's name, by group rank, exchanged through the round's rendezvous store.

    torch's agents know each other only by group rank (the node names its rendezvous keeps are
    private), so each agent writes its own name under its rank and reads the others' with the
    store's public ``set`` / ``wait`` / ``get``. A name that does not arrive within ``timeout_s``
    (its node died right after the round formed) shows as ``#RANK``; the world sizes are right
    either way, and the log never stops the group.
    """
    keys = [f"{_NAME_KEY}{rank}" for rank in range(group_world_size)]
    numbers = [f"#{rank}" for rank in range(group_world_size)]
    try:
        store.set(keys[group_rank], name)
    except Exception:  # noqa: BLE001 - a store that cannot take a write would make every read wait too
        return numbers
    try:
        store.wait(keys, datetime.timedelta(seconds=timeout_s))
    except Exception:  # noqa: BLE001 - a missing name is shown as its rank below
        pass
    names = []
    for rank, key in enumerate(keys):
        try:
            names.append(store.get(key).decode() if store.check([key]) else numbers[rank])
        except Exception:  # noqa: BLE001 - an unreachable store: stop asking it (each call could wait its timeout)
            return names + numbers[rank:]
    return names
