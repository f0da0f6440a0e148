"""Where this process sits when it runs on an XLA device (TPU, or torch_xla's CPU device under PJRT).

torch_xla's runtime, not torch.distributed's environment variables, knows the process's ordinal
and the number of processes (``torch_xla.distributed.xla_multiprocessing.spawn`` starts one per
device). :func:`xla_placement` asks it once, for :class:`~accelerate.state.process.PartialState`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from accelerate.state.environment import ClusterEnvironment


@dataclass(frozen=True)
class XLAPlacement:
    """The XLA device of this process and its place among the processes."""

    device: torch.device
    environment: ClusterEnvironment


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
    return XLAPlacement(torch.device(device), environment)


def apply_bf16_env(mixed_precision: str, downcast_bf16: bool) -> None:
    """Upstream's bf16 on XLA: torch_xla stores fp32 as bf16 (``XLA_USE_BF16``), or only downcasts
    fp32 to bf16 while keeping fp64 as fp32 (``XLA_DOWNCAST_BF16``, ``downcast_bf16: true``).

    torch_xla reads the variables when it creates tensors, so they are set before any model is moved;
    a value the user (or the launcher) already set is kept.
    """
    if mixed_precision != "bf16":
        return
    name = "XLA_DOWNCAST_BF16" if downcast_bf16 else "XLA_USE_BF16"
    os.environ.setdefault(name, "1")
