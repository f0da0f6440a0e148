"""The files each rank of a layout writes in ``save_state``, and what each rank of another layout reads.

With FSDP2 the model and optimizer are saved sharded, through torch.distributed.checkpoint (DCP):
every rank writes its own ``__{rank}_0.distcp`` in ``pytorch_model_fsdp_0/`` and ``optimizer_0/``,
rank 0 also the ``.metadata`` that maps each saved chunk to its file, and every rank its
``random_states_{rank}.pkl``; the main process writes the shared files (the loader's position, the
manifest). The names come from the code that writes them (``backends/dtensor_io``, ``checkpointing``).

Loading into another layout, DCP gives each new rank the saved chunks that overlap the rows it now
holds. FSDP2 shards a parameter's first dimension over its ``dp_shard x cp`` group as ``torch.chunk``
does (``ceil(rows / shards)`` rows each, the last ones shorter or empty); replicas along
``dp_replicate`` hold the same chunk (DCP writes it once). :func:`reshard_plan` works out, per new
rank, which saved shards it reads and which old ranks held them, and checks that every new shard
is covered exactly once. Tensor parallelism must stay the same size: a tp change re-splits the other
dimension too, which DCP handles but this plan does not model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_DIMS = ("dp_replicate", "dp_shard", "cp", "sp", "tp")


def _full(sizes: dict[str, int]) -> dict[str, int]:
    return {dim: int(sizes.get(dim, 1)) for dim in _DIMS}


def _coordinates(rank: int, sizes: dict[str, int]) -> dict[str, int]:
    """Row-major over dp_replicate, dp_shard, cp, sp, tp, as ``ParallelismConfig.coordinates``."""
    coords: dict[str, int] = {}
    for dim in reversed(_DIMS):
        coords[dim], rank = rank % sizes[dim], rank // sizes[dim]
    return coords


def shard_index(rank: int, sizes: dict[str, int]) -> int:
    """The rank's place in its FSDP2 group (``dp_shard x cp``, flattened in that order)."""
    coords = _coordinates(rank, sizes)
    return coords["dp_shard"] * sizes["cp"] + coords["cp"]


def rank_files(rank: int, *, models: int = 1, optimizers: int = 1) -> tuple[str, ...]:
    """The files ``save_state`` writes from ``rank`` with FSDP2's sharded state dict (relative paths)."""
    from accelerate.backends.dtensor_io.state_dict import model_folder_name, optimizer_folder_name
    from accelerate.checkpointing.rng import rng_file_name
    from accelerate.checkpointing.training_state import DATALOADER_STATE_NAME, indexed_name
    from accelerate.storage.durable_io import MANIFEST_NAME

    folders = [model_folder_name(i) for i in range(models)] + [
        optimizer_folder_name(i) for i in range(optimizers)
    ]
    files = [f"{folder}/__{rank}_0.distcp" for folder in folders] + [rng_file_name(rank)]
    if rank == 0:
        files += [f"{folder}/.metadata" for folder in folders]
        files += [indexed_name(DATALOADER_STATE_NAME, 0, "bin"), MANIFEST_NAME]
    return tuple(files)


def chunk_rows(rows: int, shards: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each shard's rows, as ``torch.chunk`` (and FSDP2) split ``rows``."""
    size = -(-rows // shards)
    return [(min(i * size, rows), min((i + 1) * size, rows)) for i in range(shards)]


@dataclass(frozen=True)
class ShardRead:
    """Rows ``[start, stop)`` of a parameter that a new rank reads from saved shard ``old_shard``."""

    old_shard: int
    old_ranks: tuple[int, ...]  # the old ranks that held the shard (replicas); DCP wrote it from one
    start: int
    stop: int


@dataclass
class ReshardPlan:
    """What each rank of ``new`` reads of a checkpoint saved by ``old``, for a parameter of ``rows`` rows."""

    old: dict[str, int]
    new: dict[str, int]
    rows: int
    reads: dict[int, tuple[ShardRead, ...]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        old_world, new_world = _world(self.old), _world(self.new)
        most = max((len(reads) for reads in self.reads.values()), default=0)
        how = "each reads one saved shard" if most == 1 else f"each reads at most {most} saved shards"
        return f"reshard {old_world} -> {new_world} ranks ({_named(self.new)}): {how}"


def _world(sizes: dict[str, int]) -> int:
    world = 1
    for size in sizes.values():
        world *= size
    return world


def _named(sizes: dict[str, int]) -> str:
    return " x ".join(f"{dim}={size}" for dim, size in sizes.items() if size > 1) or "one process"


def reshard_plan(old: dict[str, int], new: dict[str, int], rows: int = 4096) -> ReshardPlan:
    """Which saved shards each rank of layout ``new`` reads of an FSDP2 checkpoint saved by ``old``.

    Args:
        old: the saving layout's sizes (``{"dp_replicate": 8, "dp_shard": 16, "tp": 8}``).
        new: the loading layout's sizes; its tp must equal ``old``'s.
        rows: the first dimension of the parameter to follow (each tensor-parallel slice's rows).

    Example:
        >>> plan = reshard_plan({"dp_shard": 4}, {"dp_shard": 2}, rows=8)
        >>> [(r.old_shard, r.start, r.stop) for r in plan.reads[1]]
        [(2, 4, 6), (3, 6, 8)]
    """
    old, new = _full(old), _full(new)
    if old["tp"] != new["tp"]:
        raise ValueError(
            f"reshard_plan(old=..., new=...) plans a change of the FSDP2 sharding only, but tp changes from "
            f"{old['tp']} to {new['tp']}; keep tp the same (torch.distributed.checkpoint can still load it)."
        )
    plan = ReshardPlan(old, new, rows)
    saved = chunk_rows(rows, old["dp_shard"] * old["cp"])
    holders: dict[tuple[int, int], list[int]] = {}
    for rank in range(_world(old)):
        key = (shard_index(rank, old), _coordinates(rank, old)["tp"])
        holders.setdefault(key, []).append(rank)
    wanted = chunk_rows(rows, new["dp_shard"] * new["cp"])
    for rank in range(_world(new)):
        start, stop = wanted[shard_index(rank, new)]
        tp = _coordinates(rank, new)["tp"]
        reads = tuple(
            ShardRead(index, tuple(holders[(index, tp)]), max(start, lo), min(stop, hi))
            for index, (lo, hi) in enumerate(saved)
            if max(start, lo) < min(stop, hi)
        )
        covered = sum(read.stop - read.start for read in reads)
        if covered != stop - start:
            plan.problems.append(
                f"new rank {rank} needs rows {start}-{stop} but the saved shards cover {covered}"
            )
        plan.reads[rank] = reads
    return plan
