"""The files each rank of a layout writes in ``save_state``, and what each rank of another layout reads.

With FSDP2 the model and optimizer are saved sharded, through torch.distributed.checkpoint (DCP):
every rank writes its own ``__{rank}_0.distcp`` in ``pytorch_model_fsdp_0/`` and ``optimizer_0/``,
rank 0 also the ``.metadata`` that maps each saved chunk to its file, and every rank its
``random_states_{rank}.pkl``; the main process writes the shared files (the loader's position, the
manifest). The names come from the code that writes them (``backends/dtensor_io``, ``checkpointing``).

Loading into another layout, DCP gives each new rank the saved chunks that overlap the rows it now
holds. FSDP2 shards a parameter's first dimension over its ``dp_shard x cp x sp`` group as ``torch.chunk``
does (``ceil(rows / shards)`` rows each, the last ones shorter or empty); replicas along
``dp_replicate`` hold the same chunk (DCP writes it once). :func:`reshard_plan` works out, per new
rank, which saved shards it reads and which old ranks held them, and checks that every new shard
is covered exactly once. Tensor and pipeline parallelism must stay the same size: a tp change re-splits
the other dimension too, a pp change re-cuts the stages, which DCP handles but this plan does not model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accelerate.planning.layout import DIMS as _DIMS


def _full(sizes: dict[str, int]) -> dict[str, int]:
    return {dim: int(sizes.get(dim, 1)) for dim in _DIMS}


def _coordinates(rank: int, sizes: dict[str, int]) -> dict[str, int]:
    """Row-major over dp_replicate, dp_shard, pp, cp, sp, tp, as ``ParallelismConfig.coordinates``."""
    coords: dict[str, int] = {}
    for dim in reversed(_DIMS):
        coords[dim], rank = rank % sizes[dim], rank // sizes[dim]
    return coords


def shard_index(rank: int, sizes: dict[str, int]) -> int:
    """The rank's place in its FSDP2 group (``dp_shard x cp x sp``, flattened in that order)."""
    coords = _coordinates(rank, sizes)
    return (coords["dp_shard"] * sizes["cp"] + coords["cp"]) * sizes["sp"] + coords["sp"]


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

    def describe(self, limit: int = 8) -> str:
        """The summary, then what each of the first ``limit`` new ranks reads (rows of a parameter of
        ``rows`` rows: the saved shard, and the old ranks that held it)."""
        lines = [self.summary() + f" (a parameter of {self.rows} rows)"]
        for rank in sorted(self.reads)[:limit]:
            coords = _coordinates(rank, self.new)
            place = ", ".join(f"{dim} {coords[dim]}" for dim in _DIMS if self.new[dim] > 1)
            reads = "; ".join(
                f"rows {r.start}-{r.stop} of saved shard {r.old_shard} (old ranks {_short(r.old_ranks)})"
                for r in self.reads[rank]
            )
            lines.append(f"    new rank {rank} ({place or 'alone'}): {reads}")
        if len(self.reads) > limit:
            lines.append(f"    ... and {len(self.reads) - limit} more ranks, read the same way")
        return "\n".join(lines)


def _short(ranks: tuple[int, ...]) -> str:
    return ",".join(map(str, ranks[:4])) + (f",... ({len(ranks)})" if len(ranks) > 4 else "")


def parse_sizes(text: str, option: str = "--reshard_to") -> dict[str, int]:
    """``"dp_replicate=8,dp_shard=4,tp=8"`` as sizes by dimension (the unnamed ones are 1).

    Example:
        >>> parse_sizes("dp_shard=4, tp=8")
        {'dp_shard': 4, 'tp': 8}

    Raises:
        ValueError: a part is not ``dim=size`` with a known dimension and a size of at least 1.
    """
    sizes: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        dim, _, value = part.partition("=")
        dim = dim.strip().removesuffix("_size")
        if dim not in _DIMS or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(
                f"{option} {text!r}: {part!r} is not DIM=SIZE; write the layout like dp_replicate=8,dp_shard=4,tp=8 "
                f"(dimensions: {', '.join(_DIMS)})."
            )
        sizes[dim] = int(value)
    if not sizes:
        raise ValueError(f"{option} {text!r} names no dimension; write it like dp_shard=4,tp=8.")
    return sizes


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
    for dim, what in (("tp", "re-splits the other dimension too"), ("pp", "re-cuts the pipeline's stages")):
        if old[dim] != new[dim]:
            raise ValueError(
                f"reshard_plan(old=..., new=...) plans a change of the FSDP2 sharding only, but {dim} changes from "
                f"{old[dim]} to {new[dim]}, which {what}; keep {dim} the same (torch.distributed.checkpoint can "
                "still load it)."
            )
    plan = ReshardPlan(old, new, rows)
    saved = chunk_rows(rows, old["dp_shard"] * old["cp"] * old["sp"])
    # A saved shard is found by its place in the FSDP2 group and the (pp, tp) slice of the model it holds.
    holders: dict[tuple[int, int, int], list[int]] = {}
    for rank in range(_world(old)):
        coords = _coordinates(rank, old)
        holders.setdefault((shard_index(rank, old), coords["pp"], coords["tp"]), []).append(rank)
    wanted = chunk_rows(rows, new["dp_shard"] * new["cp"] * new["sp"])
    for rank in range(_world(new)):
        start, stop = wanted[shard_index(rank, new)]
        coords = _coordinates(rank, new)
        reads = tuple(
            ShardRead(
                index, tuple(holders[(index, coords["pp"], coords["tp"])]), max(start, lo), min(stop, hi)
            )
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
