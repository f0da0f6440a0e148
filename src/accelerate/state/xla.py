"""XLA as the state layer sees it: whether this process runs on an XLA device, where it sits, how it talks.

This is environment detection, so it lives in ``state/`` (which must not import ``backends/``);
what the XLA backend does with a model, a loader and the precision is in :mod:`accelerate.backends.xla`.

torch_xla's runtime, not torch.distributed's environment variables, knows the process's ordinal
and the number of processes (``torch_xla.distributed.xla_multiprocessing.spawn`` starts one per
device). :func:`detect_xla` asks it once, for :class:`~accelerate.state.process.PartialState`, and
the placement it returns makes the process's communicator (:class:`XLACommunicator`): under PJRT
the processes share no torch process group, so collectives and barriers go through torch_xla.
torch_xla is imported only inside these functions, and only where this process runs on XLA.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from typing import Any

import torch

from accelerate.collectives.communicator import Communicator
from accelerate.state.environment import ClusterEnvironment
from accelerate.utils.records import frozen_record


def xla_requested(cpu: bool = False) -> bool:
    """True when this process trains on an XLA device: torch_xla is installed, USE_TORCH_XLA is not
    switched off, and CPU was not forced (``cpu=True``, ``--cpu``, ``ACCELERATE_USE_CPU``).

    This is upstream's rule: where torch_xla is installed (a TPU VM, Colab), a plain ``Accelerator()``
    uses its device.
    """
    if cpu:
        return False
    from accelerate.utils.imports import is_torch_xla_available

    return is_torch_xla_available()


@dataclass
class XLACommunicator(Communicator):
    """The collectives through torch_xla (``xm.all_gather``, ``xm.all_reduce``, ``xm.collective_broadcast``,
    ``xm.rendezvous``) instead of torch.distributed: under PJRT the processes share no torch
    process group, each owns one XLA device."""

    @property
    def can_check_shapes(self) -> bool:
        # No torch.distributed store is shared under PJRT, so debug mode's shape checks cannot run.
        return False

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        import torch_xla.core.xla_model as xm

        gathered: torch.Tensor = xm.all_gather(tensor, dim=0)
        return gathered

    def all_reduce_sum_(self, tensor: torch.Tensor) -> None:
        import torch_xla.core.xla_model as xm

        # A list input is reduced in place (a single tensor would come back as a new one).
        xm.all_reduce(xm.REDUCE_SUM, [tensor])

    def all_reduce_max_(self, tensor: torch.Tensor) -> None:
        import torch_xla.core.xla_model as xm

        xm.all_reduce(xm.REDUCE_MAX, [tensor])

    def broadcast_(self, tensor: torch.Tensor, src: int) -> None:
        import torch_xla.core.xla_model as xm

        xm.collective_broadcast([tensor], root_ordinal=src)

    def all_gather_objects(self, obj: Any) -> list[Any]:
        import torch_xla.core.xla_model as xm

        # rendezvous hands every process each one's payload: the pickled objects travel as bytes.
        payloads = xm.rendezvous("accelerate.gather_object", pickle.dumps(obj))
        return [pickle.loads(payload) for payload in payloads]  # noqa: S301 - our own processes' data

    def broadcast_objects_(self, objects: list[Any], src: int) -> None:
        gathered = self.all_gather_objects(objects if self.rank == src else None)
        objects[:] = gathered[src]

    def barrier(self, tag: str = "accelerate.wait_for_everyone") -> None:
        """Blocks until every process reaches a barrier with the same ``tag``."""
        import torch_xla.core.xla_model as xm

        xm.rendezvous(tag)


@frozen_record  # not a dataclass: this module loads with every PartialState (see accelerate.utils.records)
class XLAPlacement:
    """The XLA device of this process and its place among the processes."""

    device: torch.device
    environment: ClusterEnvironment

    def communicator(self, environment: ClusterEnvironment | None = None) -> XLACommunicator:
        """The communicator the process binds: torch_xla's collectives over the processes of
        ``environment`` (the process's, when given; else the one torch_xla's runtime reported)."""
        env = environment if environment is not None else self.environment
        return XLACommunicator(world_size=env.world_size, rank=env.rank, device=self.device)


def xla_placement() -> XLAPlacement:
    """This process's XLA device and ordinal (torch_xla must be importable; the caller checked)."""
    import torch_xla
    import torch_xla.runtime as xr

    make_device = getattr(torch_xla, "device", None)
    if make_device is not None:
        device = make_device()
    else:  # torch_xla < 2.5
        import torch_xla.core.xla_model as xm

        device = xm.xla_device()
    world = int(xr.world_size())
    rank = int(xr.global_ordinal())
    local_rank = int(xr.local_ordinal())
    local_world = int(getattr(xr, "local_process_count", lambda: world)())
    environment = ClusterEnvironment(
        world_size=world,
        rank=rank,
        local_rank=local_rank,
        local_world_size=local_world,
        master_addr=os.environ.get("MASTER_ADDR", "127.0.0.1"),
        source="xla",
    )
    return XLAPlacement(device=torch.device(device), environment=environment)


def detect_xla(cpu: bool = False) -> XLAPlacement | None:
    """This process's XLA placement when it runs on an XLA device (:func:`xla_requested`), else None."""
    return xla_placement() if xla_requested(cpu) else None


__all__ = ["XLACommunicator", "XLAPlacement", "detect_xla", "xla_placement", "xla_requested"]
