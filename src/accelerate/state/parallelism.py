"""`ParallelismConfig`: the degrees of each kind of parallelism, checked once, and the device mesh.

One value object describes the topology: data-parallel replication (``dp_replicate``, what DDP
does), data-parallel sharding (``dp_shard``, FSDP), context (``cp``), sequence (``sp``) and tensor
(``tp``) parallelism. Unset sizes mean 1. A ParallelismConfig here describes pure data parallelism:
its mesh is a 1-D mesh named ``dp_replicate`` over the whole process group. FSDP itself runs (through
``Accelerator(fsdp_plugin=...)`` or ``accelerate launch --use_fsdp``, sharding over all processes);
what is not available yet is setting a ``dp_shard`` degree here, or any model-parallel degree (context,
sequence, tensor), and building such a mesh raises saying so.

Pure data apart from :meth:`ParallelismConfig.build_device_mesh`; nothing here reads ``os.environ``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from accelerate.utils.errors import NotAvailableYetError

# Mesh dimensions, outermost first (the order a device mesh lists them in).
_DIMS = ("dp_replicate", "dp_shard", "cp", "sp", "tp")


@dataclass
class ParallelismConfig:
    """How many processes each kind of parallelism spans; their product is the world size.

    Example:
        >>> config = ParallelismConfig(dp_replicate_size=2)
        >>> config.total_size, config.dp_dim_names
        (2, ['dp_replicate'])
        >>> mesh = config.build_device_mesh("cpu")  # inside a 2-process run
    """

    dp_replicate_size: int | None = None
    dp_shard_size: int | None = None
    tp_size: int | None = None
    cp_size: int | None = None
    cp_backend: str | None = None
    sp_size: int | None = None
    sp_backend: str | None = None
    tp_handler: Any = None
    cp_handler: Any = None
    sp_handler: Any = None

    def __post_init__(self) -> None:
        self.device_mesh: Any = None  # built on demand; not a field (not compared, printed or serialised)
        for dim in _DIMS:
            name = f"{dim}_size"
            value = getattr(self, name)
            if value is None:
                setattr(self, name, 1)
            elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ParallelismConfig({name}={value!r}) must be an integer >= 1 (or None for 1).")
        self.cp_backend = self.cp_backend or "torch"
        self.sp_backend = self.sp_backend or "deepspeed"
        if self.cp_backend != "torch":
            raise ValueError(f"ParallelismConfig(cp_backend={self.cp_backend!r}) must be 'torch'.")
        if self.sp_backend != "deepspeed":
            raise ValueError(f"ParallelismConfig(sp_backend={self.sp_backend!r}) must be 'deepspeed'.")
        if self.cp_enabled and self.sp_enabled:
            raise ValueError(
                f"ParallelismConfig(cp_size={self.cp_size}, sp_size={self.sp_size}): context and sequence "
                "parallelism split the same sequence dimension; use one of them."
            )

    def _size(self, dim: str) -> int:
        return int(getattr(self, f"{dim}_size"))

    # --- sizes and flags -----------------------------------------------------------------------
    @property
    def total_size(self) -> int:
        """The number of processes the configuration spans (the product of every degree)."""
        total = 1
        for dim in _DIMS:
            total *= self._size(dim)
        return total

    @property
    def data_parallel_size(self) -> int:
        return self._size("dp_replicate") * self._size("dp_shard")

    @property
    def non_data_parallel_size(self) -> int:
        return self._size("cp") * self._size("sp") * self._size("tp")

    @property
    def dp_replicate_enabled(self) -> bool:
        return self._size("dp_replicate") > 1

    @property
    def dp_shard_enabled(self) -> bool:
        return self._size("dp_shard") > 1

    @property
    def tp_enabled(self) -> bool:
        return self._size("tp") > 1

    @property
    def cp_enabled(self) -> bool:
        return self._size("cp") > 1

    @property
    def sp_enabled(self) -> bool:
        return self._size("sp") > 1

    # --- mesh dimension names (enabled dimensions only, outermost first) -------------------------
    def _enabled(self, *dims: str) -> list[str]:
        return [dim for dim in dims if self._size(dim) > 1]

    @property
    def active_mesh_dims(self) -> list[str]:
        return self._enabled(*_DIMS)

    @property
    def dp_dim_names(self) -> list[str]:
        return self._enabled("dp_replicate", "dp_shard")

    @property
    def non_dp_dim_names(self) -> list[str]:
        return self._enabled("cp", "sp", "tp")

    @property
    def dp_shard_cp_dim_names(self) -> list[str]:
        return self._enabled("dp_shard", "cp")

    @property
    def dp_cp_dim_names(self) -> list[str]:
        return self._enabled("dp_replicate", "dp_shard", "cp")

    @property
    def fsdp_dim_names(self) -> list[str]:
        """The dimensions FSDP shards (or replicates, for HSDP) parameters over."""
        return self._enabled("dp_replicate", "dp_shard", "cp")

    def _get_mesh(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """The enabled dimensions' names and sizes, outermost first, as ``init_device_mesh`` takes them.

        ``(("dp_replicate", "tp"), (2, 4))`` for ``dp_replicate_size=2, tp_size=4``; ``((), ())`` when
        every degree is 1.
        """
        dims = self.active_mesh_dims
        return tuple(dims), tuple(self._size(dim) for dim in dims)

    def check_available(self) -> None:
        """Raises NotAvailableYetError unless this is plain data parallelism (what a config here can describe)."""
        unavailable = self._enabled("dp_shard", "cp", "sp", "tp")
        if unavailable:
            sizes = ", ".join(f"{dim}_size={self._size(dim)}" for dim in unavailable)
            raise NotAvailableYetError(
                f"ParallelismConfig({sizes}): a sharding degree set here, and context, sequence and tensor "
                "parallelism, are not available in this version of accelerate yet. Set only "
                "dp_replicate_size (plain data parallelism) or leave the config out; to shard the model "
                "over all processes use Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin()) or "
                "`accelerate launch --use_fsdp`."
            )

    # --- the mesh --------------------------------------------------------------------------------
    def build_device_mesh(self, device_type: str) -> Any:
        """A ``torch.distributed.DeviceMesh`` over the current process group for this configuration.

        Pure data parallelism gives a 1-D mesh named ``dp_replicate`` (or a trivial one-process mesh).
        Raises NotAvailableYetError for sharding, context, sequence or tensor parallelism, and
        ValueError when the degrees do not multiply to the world size.
        """
        self.check_available()
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if self.total_size != world:
            raise ValueError(
                f"ParallelismConfig spans {self.total_size} processes (dp_replicate_size={self.dp_replicate_size}) "
                f"but this run has {world}. Set dp_replicate_size={world}, or launch {self.total_size} processes."
            )
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError(
                "ParallelismConfig.build_device_mesh needs a torch.distributed process group; one process "
                "has none. Create the Accelerator (or PartialState) first in a launched run "
                "(`accelerate launch --num_processes N`), or leave parallelism_config out in one process."
            )
        return init_device_mesh(device_type, (world,), mesh_dim_names=("dp_replicate",))

    def get_device_mesh(self, device_type: str | None = None) -> Any:
        """The mesh built earlier, or a new one for ``device_type``."""
        if self.device_mesh is None:
            if device_type is None:
                raise ValueError(
                    "ParallelismConfig.get_device_mesh() has no mesh yet; pass device_type (e.g. 'cpu' or "
                    "'cuda') to build one."
                )
            self.device_mesh = self.build_device_mesh(device_type)
        return self.device_mesh

    def to_json(self) -> str:
        """The sizes, backends and handlers as JSON (dataclass handlers become objects, others their repr)."""
        return json.dumps(asdict(self), sort_keys=True, default=repr)



def device_mesh_for(config: ParallelismConfig | None, num_processes: int, device_type: str) -> Any:
    """The Accelerator's mesh: None without a config or in one process, else the config's mesh.

    A config whose degrees do not multiply to ``num_processes`` is an error naming both.
    """
    if config is None:
        return None
    config.check_available()
    if config.total_size != num_processes:
        raise ValueError(
            f"ParallelismConfig spans {config.total_size} processes (dp_replicate_size={config.dp_replicate_size}) "
            f"but this run has {num_processes}. Set dp_replicate_size={num_processes}, or launch "
            f"{config.total_size} processes."
        )
    if num_processes == 1:
        return None  # one process: no group to build a mesh over, and nothing to split
    return config.get_device_mesh(device_type)
