"""The plan checker: every rank's real set-up for a world size this machine does not have.

For each rank in turn, one process joins torch's fake process group (``backend="fake"``: every
collective returns at once, nothing is sent) as that rank of ``world_size``, and runs the code a
launched process runs: ``ParallelismConfig`` checks its sizes and builds the N-D device mesh with
its flattened sub-meshes, the parallel backend picks the mesh FSDP2 shards over (``fsdp_mesh``),
and ``prepare_data_loader`` shards an epoch with the rank's data-parallel coordinate. The checker
compares each rank's mesh coordinate and groups with the row-major layout, and the epoch across
ranks: every sample read by exactly one data-parallel group, and the same samples within a tensor-
or context-parallel group. 1,024 ranks take seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from accelerate.planning.estimate import MemoryEstimate

_DIMS = ("dp_replicate", "dp_shard", "cp", "sp", "tp")


@dataclass(frozen=True)
class RankSetup:
    """What one rank's set-up produced."""

    rank: int
    coordinate: dict[str, int]
    data_parallel_index: int
    fsdp_group_size: int  # ranks FSDP2 shards (or replicates) this rank's parameters over; 1 without FSDP
    samples: tuple[int, ...]  # the sample indices this rank reads in the epoch, in order


@dataclass
class PlanCheck:
    """The outcome of :func:`check_plan`: the sizes, each rank's set-up and every problem found."""

    sizes: dict[str, int]
    world_size: int
    ranks: list[RankSetup] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    estimate: MemoryEstimate | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """A few lines: the layout, what was checked, and each problem (or that there were none)."""
        named = " x ".join(f"{dim}={size}" for dim, size in self.sizes.items() if size > 1) or "one process"
        dp = len({setup.data_parallel_index for setup in self.ranks})
        lines = [
            f"Plan check: {named} on {self.world_size} ranks (fake process group, every rank's set-up run)",
            f"  device mesh and sub-meshes built on {len(self.ranks)} ranks; {dp} data-parallel groups; "
            f"epoch of {sum(len(s.samples) for s in self.ranks if s.coordinate.get('tp', 0) == 0 and s.coordinate.get('cp', 0) == 0)} "
            "samples sharded",
        ]  # fmt: skip
        if self.estimate is not None:
            lines.append(
                f"  memory: peak {self.estimate.peak / 1e9:.2f} GB per rank (rank {self.estimate.peak_rank})"
            )
        lines += [f"  problem: {problem}" for problem in self.problems] or ["  no problems found"]
        return "\n".join(lines)


def _expected_group(rank: int, dim: str, sizes: dict[str, int]) -> list[int]:
    """The ranks that differ from ``rank`` only along ``dim`` in a row-major mesh, in mesh order."""
    stride = math.prod(sizes[d] for d in _DIMS[_DIMS.index(dim) + 1 :])
    start = rank - ((rank // stride) % sizes[dim]) * stride
    return [start + i * stride for i in range(sizes[dim])]


def _one_rank(rank: int, world_size: int, sizes: dict[str, int], dataset_size: int, batch_size: int,
              seed: int, problems: list[str]) -> RankSetup:  # fmt: skip
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torch.utils.data import DataLoader

    from accelerate.backends.parallel.fsdp import fsdp_mesh
    from accelerate.data.prepare import prepare_data_loader
    from accelerate.state.parallelism import ParallelismConfig

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        config = ParallelismConfig(
            dp_replicate_size=sizes["dp_replicate"], dp_shard_size=sizes["dp_shard"], tp_size=sizes["tp"],
            cp_size=sizes["cp"], sp_size=sizes["sp"],
        )  # fmt: skip
        config.validate(world_size)
        mesh = config.get_device_mesh("cpu")
        expected = config.coordinates(rank)
        names = tuple(mesh.mesh_dim_names or ()) if mesh is not None else ()
        got = dict(zip(names, mesh.get_coordinate() or (), strict=True)) if names else {}
        if any(got[dim] != expected[dim] for dim in names):
            problems.append(f"rank {rank}: the device mesh puts it at {got}, the layout at {expected}")
        for dim in names:
            members = mesh[dim].mesh.flatten().tolist()
            if members != _expected_group(rank, dim, sizes):
                problems.append(
                    f"rank {rank}: its {dim} group is {members}, not {_expected_group(rank, dim, sizes)}"
                )
        dp_index = config.data_parallel_index(rank)
        if config.dp_dim_names and config.submesh("dp").get_local_rank() != dp_index:
            problems.append(
                f"rank {rank}: its place in the flattened dp mesh is not its data index {dp_index}"
            )
        sharded = fsdp_mesh(config)
        fsdp_size = int(sharded.size()) if sharded is not None else 1
        want = (
            sizes["dp_shard"] * sizes["cp"] * sizes["dp_replicate"] if config.dp_shard_cp_dim_names else None
        )
        if want is not None and fsdp_size != want:
            problems.append(f"rank {rank}: FSDP2 shards over {fsdp_size} ranks, the layout says {want}")
        loader: DataLoader[int] = DataLoader(range(dataset_size), batch_size=batch_size)  # type: ignore[arg-type]
        prepared = prepare_data_loader(loader, device="cpu", num_processes=config.data_parallel_size,
                                       process_index=dp_index, data_seed=seed)  # fmt: skip
        batches: Any = prepared.batch_sampler  # the rank's BatchSamplerShard: index lists, no data loaded
        samples = tuple(int(i) for batch in batches for i in batch)
    finally:
        dist.destroy_process_group()
    return RankSetup(rank, expected, dp_index, fsdp_size, samples)


def _check_epoch(check: PlanCheck, dataset_size: int) -> None:
    by_index: dict[int, tuple[int, ...]] = {}
    for setup in check.ranks:
        first = by_index.setdefault(setup.data_parallel_index, setup.samples)
        if setup.samples != first:
            check.problems.append(
                f"rank {setup.rank} reads other samples than the rest of data-parallel group "
                f"{setup.data_parallel_index} (its tensor/context-parallel peers)"
            )
    seen = [sample for samples in by_index.values() for sample in samples]
    missing = set(range(dataset_size)) - set(seen)
    if missing:
        check.problems.append(f"{len(missing)} samples are read by no rank (e.g. {sorted(missing)[:5]})")
    extra = len(seen) - len(set(seen))
    if extra:
        check.problems.append(
            f"{extra} samples are read twice in one epoch (the last round is padded to even batches): make the "
            "dataset size a multiple of data-parallel size x batch size, or accept the repeats"
        )


def check_plan(sizes: dict[str, int], world_size: int | None = None, *, dataset_size: int | None = None,
               batch_size: int = 2, seed: int = 0, estimate: MemoryEstimate | None = None) -> PlanCheck:  # fmt: skip
    """Runs every rank's set-up for ``sizes`` (``ParallelismConfig`` sizes by dimension name) on the
    fake process group and reports what disagrees with the layout.

    Args:
        sizes: ``{"dp_replicate": 8, "dp_shard": 16, "tp": 8}``; unnamed dimensions are 1.
        world_size: the ranks to check (default: the product of ``sizes``).
        dataset_size: samples in the epoch to shard (default: two batches per data-parallel group).
        batch_size: the per-rank batch size of the loader.
        seed: the shuffling seed every rank's sampler shares.
        estimate: a memory estimate to report with the check.

    Example:
        >>> check = check_plan({"dp_replicate": 2, "dp_shard": 2, "tp": 2})
        >>> check.ok, len(check.ranks)
        (True, 8)
    """
    full = {dim: int(sizes.get(dim, 1)) for dim in _DIMS}
    unknown = set(sizes) - set(_DIMS)
    if unknown:
        raise ValueError(
            f"check_plan(sizes=...) names unknown dimensions {sorted(unknown)}; use {', '.join(_DIMS)}."
        )
    world = math.prod(full.values()) if world_size is None else world_size
    data_parallel = full["dp_replicate"] * full["dp_shard"]
    dataset_size = 2 * batch_size * data_parallel if dataset_size is None else dataset_size
    check = PlanCheck(full, world, estimate=estimate)
    if math.prod(full.values()) != world:
        check.problems.append(
            f"the sizes multiply to {math.prod(full.values())} ranks, not world_size={world}"
        )
        return check
    for rank in range(world):
        check.ranks.append(_one_rank(rank, world, full, dataset_size, batch_size, seed, check.problems))
    _check_epoch(check, dataset_size)
    return check
