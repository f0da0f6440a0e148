"""`ParallelismConfig`: the degrees of each kind of parallelism, checked once, and the device mesh.

One value object describes the topology: data-parallel replication (``dp_replicate``, what DDP
does), data-parallel sharding (``dp_shard``, FSDP), context (``cp``), sequence (``sp``) and tensor
(``tp``) parallelism. Unset sizes mean 1, except ``dp_shard_size``, which takes the processes the
other sizes leave. The mesh is one named N-D ``DeviceMesh`` (dims dp_replicate, dp_shard, cp, sp, tp,
those above 1) with the flattened sub-meshes ``dp``, ``dp_shard_cp``, ``dp_cp`` (and ``dp_shard_sp``);
expert parallelism (``ep_size``) adds no process: it splits ``dp_shard`` into (expert replica, ``ep``);
``backends/parallel/`` composes tensor parallelism, FSDP2/HSDP, replication and sequence parallelism
on it. Sequence parallelism (``sp``) is DeepSpeed's Ulysses in upstream; here ``sp_backend="torch"``
(the default unless DeepSpeed is the engine) runs a native Ulysses (``backends/parallel/ulysses.py``)
and ``"deepspeed"`` (DeepSpeed's own) is not available yet. Context parallelism needs CUDA (torch's
ring attention has no CPU kernel); it raises saying so.

Pure data apart from :meth:`ParallelismConfig.build_device_mesh`, and, as upstream, the sizes and
backends left unset come from the launcher's ``PARALLELISM_CONFIG_*`` variables (read through the env
contract, :func:`accelerate.config.env.parallelism_defaults`): a ``ParallelismConfig()`` built inside
``accelerate launch --parallelism_config_tp_size 2`` has ``tp_size == 2``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from accelerate.utils.errors import NotAvailableYetError

# Mesh dimensions, outermost first (the order a device mesh lists them in).
# Pipeline stages come right after the data-parallel dimensions: every dimension whose ranks read the
# same batch is inner, so the ranks of one data shard are neighbours (gather_for_metrics relies on it).
_DIMS = ("dp_replicate", "dp_shard", "pp", "cp", "sp", "tp")


def _launcher_defaults() -> dict[str, object]:
    from accelerate.config.env import parallelism_defaults

    return parallelism_defaults()


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
    # Pipeline-parallel training (beyond upstream; see backends/parallel/pipeline_model.py).
    pp_size: int | None = None
    pp_schedule: str | None = None
    pp_microbatches: int | None = None
    pp_split_points: Any = None
    pp_loss_fn: Any = None
    # Expert parallelism (beyond upstream): carved from dp_shard, see backends/parallel/experts.py.
    ep_size: int | None = None

    def __post_init__(self) -> None:
        self.device_mesh: Any = None  # built on demand; not a field (not compared, printed or serialised)
        self._flattened: dict[str, Any] = {}  # "dp", "dp_shard_cp", "dp_cp" sub-meshes of device_mesh
        for name, value in _launcher_defaults().items():  # what the user did not give, as upstream
            if getattr(self, name) is None:
                setattr(self, name, value)
        # An unset dp_shard_size absorbs the processes the other sizes leave (see validate).
        self._dp_shard_given = self.dp_shard_size is not None
        for dim in _DIMS:
            name = f"{dim}_size"
            value = getattr(self, name)
            if value is None:
                setattr(self, name, 1)
            elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"ParallelismConfig({name}={value!r}) must be an integer >= 1 (or None for 1)."
                )
        if self.ep_size is None:
            self.ep_size = 1
        elif not isinstance(self.ep_size, int) or isinstance(self.ep_size, bool) or self.ep_size < 1:
            raise ValueError(
                f"ParallelismConfig(ep_size={self.ep_size!r}) must be an integer >= 1 (or None for 1)."
            )
        self.cp_backend = self.cp_backend or "torch"
        # Upstream's default is "deepspeed" (its only sequence-parallel engine). Here an unset backend
        # runs the native Ulysses; the resolver switches it to "deepspeed" when DeepSpeed is the engine
        # (resolve_sp_backend), so upstream's users keep upstream's meaning.
        self._sp_backend_given = self.sp_backend is not None
        self.sp_backend = self.sp_backend or ("torch" if self._size("sp") > 1 else "deepspeed")
        # As upstream: a dimension in use gets its default handler (what the user sees on the config).
        from accelerate.utils.parallel_configs import TorchContextParallelConfig, TorchTensorParallelConfig

        if self.tp_handler is None and self._size("tp") > 1:
            self.tp_handler = TorchTensorParallelConfig()
        if self.cp_handler is None and self._size("cp") > 1:
            self.cp_handler = TorchContextParallelConfig()
        if self.cp_backend != "torch":
            raise ValueError(f"ParallelismConfig(cp_backend={self.cp_backend!r}) must be 'torch'.")
        if self.sp_backend not in ("torch", "deepspeed"):
            raise ValueError(
                f"ParallelismConfig(sp_backend={self.sp_backend!r}) must be 'torch' (native Ulysses) or "
                "'deepspeed' (DeepSpeed's Ulysses, with a DeepSpeed engine)."
            )
        from accelerate.state.pipeline_options import check_pipeline_options

        check_pipeline_options(self)
        if self.cp_enabled and self.sp_enabled:
            raise ValueError(
                f"ParallelismConfig(cp_size={self.cp_size}, sp_size={self.sp_size}): context and sequence "
                "parallelism split the same sequence dimension; use one of them."
            )
        if self.tp_enabled and self.sp_enabled:
            # Both would split the attention heads (tp by its column-parallel projections, Ulysses by
            # its all-to-all); splitting the already-split heads again is not implemented.
            raise ValueError(
                f"ParallelismConfig(sp_size={self.sp_size}, tp_size={self.tp_size}): sequence parallelism "
                "(Ulysses) and tensor parallelism both split the attention heads and do not compose here. Use "
                "one of them, and give the other processes to dp_shard_size (FSDP) or dp_replicate_size."
            )

        self._check_expert_composition()

    def _check_expert_composition(self) -> None:
        # ep is carved from dp_shard: the expert all-to-all runs between ranks that read different
        # batches. With tp each tensor-parallel rank exchanges with its own expert group (the experts are
        # replicated over tp, see backends/parallel/experts.py). The dimensions that split one batch (cp,
        # sp) or the layers (pp) would need the exchange to run per slice or per stage; not built yet.
        if not self.ep_enabled:
            return
        for dim in ("cp", "sp", "pp"):
            if self._size(dim) > 1:
                raise ValueError(
                    f"ParallelismConfig(ep_size={self.ep_size}, {dim}_size={self._size(dim)}): ep with {dim} is not "
                    f"supported yet (expert parallelism composes with dp_shard_size, dp_replicate_size and tp_size). "
                    f"Set {dim}_size=1 and give those processes to dp_shard_size, which ep is carved from."
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
        return self._size("pp") * self._size("cp") * self._size("sp") * self._size("tp")

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

    @property
    def pp_enabled(self) -> bool:
        return self._size("pp") > 1

    @property
    def ep_enabled(self) -> bool:
        """Whether the experts of mixture-of-experts layers are split over ``ep_size`` ranks."""
        return int(self.ep_size or 1) > 1

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
        return self._enabled("pp", "cp", "sp", "tp")

    @property
    def dp_shard_cp_dim_names(self) -> list[str]:
        return self._enabled("dp_shard", "cp")

    @property
    def dp_cp_dim_names(self) -> list[str]:
        return self._enabled("dp_replicate", "dp_shard", "cp")

    @property
    def shard_dim_names(self) -> list[str]:
        """The dimensions whose ranks FSDP2 shards parameters over: ``dp_shard`` and the dimensions that
        split one batch's sequence (``cp``, ``sp``), whose ranks hold the same weights."""
        return self._enabled("dp_shard", "cp", "sp")

    def resolve_sp_backend(self, *, deepspeed_engine: bool) -> None:
        """Settles which Ulysses runs ``sp``, once the engine is known (before any process group).

        An unset ``sp_backend`` follows the engine: DeepSpeed's own with DeepSpeed, the native one
        otherwise. A backend given explicitly must match the engine.

        Raises:
            ValueError: ``sp_backend`` names an engine the run does not use.
        """
        if not self.sp_enabled:
            return
        wanted = "deepspeed" if deepspeed_engine else "torch"
        if not self._sp_backend_given:
            self.sp_backend = wanted
        elif self.sp_backend != wanted:
            engine = "a DeepSpeed engine (deepspeed_plugin)" if deepspeed_engine else "no DeepSpeed engine"
            raise ValueError(
                f"ParallelismConfig(sp_size={self.sp_size}, sp_backend={self.sp_backend!r}) but the run has "
                f"{engine}. Use sp_backend={wanted!r}, or leave sp_backend unset to follow the engine."
            )

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

    def check_available(self, device_type: str | None = None) -> None:
        """Raises NotAvailableYetError for what cannot run: DeepSpeed's Ulysses (``sp_backend="deepspeed"``),
        and context parallelism off CUDA (checked once ``device_type`` is known)."""
        if self.sp_enabled and self.sp_backend == "deepspeed":
            raise NotAvailableYetError(
                f"ParallelismConfig(sp_size={self.sp_size}, sp_backend='deepspeed'): DeepSpeed's Ulysses sequence "
                "parallelism is not available in this version of accelerate. Use the native Ulysses instead: "
                "sp_backend='torch' without DeepSpeed (FSDP2 through dp_shard_size shards the model)."
            )
        if self.cp_enabled and device_type is not None and device_type != "cuda":
            raise NotAvailableYetError(
                f"ParallelismConfig(cp_size={self.cp_size}) on {device_type}: context parallelism runs torch's "
                "ring attention, which has no CPU kernel (its CPU flash-attention op has no sharding strategy). "
                "Train on CUDA GPUs for cp_size > 1, or leave cp_size unset (tp_size and dp_shard_size run on CPU)."
            )

    def _sizes_text(self) -> str:
        # pp_size only when a pipeline is asked for: most runs never set it.
        dims = [dim for dim in _DIMS if dim != "pp" or self.pp_enabled]
        return ", ".join(f"{dim}_size={self._size(dim)}" for dim in dims)

    def validate(self, world_size: int) -> None:
        """Checks once that the sizes multiply to ``world_size``; an unset ``dp_shard_size`` first takes
        whatever the other sizes leave (``tp_size=2`` on 8 processes shards data over 4).

        Raises:
            ValueError: the product is not the world size, naming each size and the world.
        """
        others = self.total_size // self._size("dp_shard")
        if not self._dp_shard_given and world_size % others == 0 and world_size >= others:
            self.dp_shard_size = world_size // others
        if (
            self.total_size == world_size
            and self.ep_enabled
            and self._size("dp_shard") % int(self.ep_size or 1)
        ):
            raise ValueError(
                f"ParallelismConfig(ep_size={self.ep_size}, dp_shard_size={self.dp_shard_size}): expert parallelism "
                f"is carved from the data-parallel shard dimension, so ep_size must divide dp_shard_size "
                f"({self.dp_shard_size} is not a multiple of {self.ep_size}). Use an ep_size that divides "
                f"{self.dp_shard_size}, or more processes in dp_shard_size."
            )
        if self.total_size != world_size:
            raise ValueError(
                f"ParallelismConfig spans {self.total_size} processes ({self._sizes_text()}, whose product is "
                f"the number of processes) but this run has {world_size}. Change the sizes so that they "
                f"multiply to {world_size}, or launch {self.total_size} processes "
                f"(`accelerate launch --num_processes {self.total_size}`)."
            )

    def coordinates(self, rank: int) -> dict[str, int]:
        """Process ``rank``'s index along every dimension (dims of size 1 give 0).

        Ranks fill the mesh row-major in the order dp_replicate, dp_shard, pp, cp, sp, tp: the tensor-
        parallel ranks of one group are neighbours, as ``init_device_mesh`` lays them out.
        """
        coords: dict[str, int] = {}
        for dim in reversed(_DIMS):
            size = self._size(dim)
            coords[dim] = rank % size
            rank //= size
        if self.ep_enabled:  # the inner factor of dp_shard: neighbouring shards exchange tokens
            coords["ep"] = coords["dp_shard"] % int(self.ep_size or 1)
        return coords

    def data_parallel_index(self, rank: int) -> int:
        """Which data shard process ``rank`` reads: its place on the (dp_replicate x dp_shard) grid."""
        coords = self.coordinates(rank)
        return coords["dp_replicate"] * self._size("dp_shard") + coords["dp_shard"]

    # --- the mesh --------------------------------------------------------------------------------
    def build_device_mesh(self, device_type: str) -> Any:
        """The named N-D ``torch.distributed.DeviceMesh`` over the current process group.

        Dimensions (those above 1) in the order dp_replicate, dp_shard, pp, cp, sp, tp, plus the flattened
        sub-meshes ``dp`` (replicate x shard), ``dp_shard_cp`` (what FSDP shards over), ``dp_cp`` and, with
        sequence parallelism, ``dp_shard_sp`` (what FSDP shards over then):
        ``mesh["tp"]`` is the group a tensor-parallel plan runs on.

        Raises:
            NotAvailableYetError: sequence parallelism, or context parallelism off CUDA.
            ValueError: the sizes do not multiply to the world size, or there is no process group.
        """
        self.check_available(device_type)
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        self.validate(world)
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError(
                "ParallelismConfig.build_device_mesh needs a torch.distributed process group; one process "
                "has none. Create the Accelerator (or PartialState) first in a launched run "
                "(`accelerate launch --num_processes N`), or leave parallelism_config out in one process."
            )
        names, sizes = self._get_mesh()
        mesh = init_device_mesh(device_type, sizes, mesh_dim_names=names)
        for flat, dims in (
            ("dp", self.dp_dim_names),
            ("dp_shard_cp", self.dp_shard_cp_dim_names),
            ("dp_cp", self.dp_cp_dim_names),
            ("dp_shard_sp", self._enabled("dp_shard", "sp")),
        ):
            # dp_shard_sp only when both are there (what FSDP2 shards over with sp; one alone needs no flattening).
            if dims and (flat != "dp_shard_sp" or len(dims) == 2):
                # Kept here too: slicing a flattened name from the root mesh is deprecated in torch.
                self._flattened[flat] = mesh[tuple(dims)]._flatten(flat)
        return mesh

    def submesh(self, name: str) -> Any:
        """The built mesh's dimension ``name`` or flattened sub-mesh (``"tp"``, ``"dp_shard_cp"``, ...)."""
        if self.device_mesh is None:
            raise ValueError(
                f"ParallelismConfig.submesh({name!r}): no mesh yet; build one with get_device_mesh()."
            )
        if name in self._flattened:
            return self._flattened[name]
        return self.device_mesh[name]

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
    """The Accelerator's mesh: None without a config or in one process, else the config's N-D mesh.

    Validated once here: sizes that do not multiply to ``num_processes`` are an error naming each.
    """
    if config is None:
        return None
    config.check_available(device_type)
    config.validate(num_processes)
    if num_processes == 1:
        return None  # one process: no group to build a mesh over, and nothing to split
    _check_same_mesh_everywhere(config)
    return config.get_device_mesh(device_type)


def _check_same_mesh_everywhere(config: ParallelismConfig) -> None:
    """Raises on every rank when the ranks were given different meshes.

    Ranks that disagree would build sub-groups that never match up and wait in them forever; one
    small gather turns that hang into an error that lists each rank's sizes.
    """
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return
    mine = config._get_mesh()
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    if any(tuple(map(tuple, other)) != mine for other in everyone):
        listing = "; ".join(
            f"rank {rank}: " + (" x ".join(f"{n}={s}" for n, s in zip(*other, strict=True)) or "no dims")
            for rank, other in enumerate(everyone)
        )
        raise ValueError(
            f"The processes were given different ParallelismConfig meshes ({listing}). Every process must "
            "build the same ParallelismConfig: derive the sizes from the launcher (--parallelism_config_*), "
            "not from anything that differs per rank."
        )
