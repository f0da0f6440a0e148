"""The plan checker: every rank's real set-up for a world size this machine does not have.

For each rank in turn, one process joins torch's fake process group (``backend="fake"``: every
collective returns at once, nothing is sent) as that rank of ``world_size``, and runs the code a
launched process runs: ``ParallelismConfig`` checks its sizes and builds the N-D device mesh with
its flattened sub-meshes, the parallel backend picks the mesh FSDP2 shards over (``fsdp_mesh``),
and ``prepare_data_loader`` shards an epoch with the rank's data-parallel coordinate. The checker
compares each rank's mesh coordinate and groups with the row-major layout, and the epoch across
ranks: every sample read by exactly one data-parallel group, and the same samples within a tensor-
or context-parallel group. It lists the checkpoint files each rank's ``save_state`` writes (no two
ranks the same path) and, given another layout, which saved shards each of its ranks would read
(:mod:`accelerate.planning.checkpoint_plan`).

A mesh costs each rank time in proportion to the world size (torch builds every sub-group on every
rank), so all ranks' meshes cost its square: past ``setup_limit`` ranks (256), that many ranks spread
over the world run the whole set-up, and every rank's place is checked in the mesh torch built.
1,024 ranks take a few seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from accelerate.planning.checkpoint_plan import ReshardPlan, rank_files, reshard_plan
from accelerate.planning.estimate import MemoryEstimate
from accelerate.planning.layout import DIMS as _DIMS


@dataclass(frozen=True)
class RankSetup:
    """What one rank's set-up produced."""

    rank: int
    coordinate: dict[str, int]
    data_parallel_index: int
    fsdp_group_size: int  # ranks FSDP2 shards (or replicates) this rank's parameters over; 1 without FSDP
    samples: tuple[int, ...]  # the sample indices this rank reads in the epoch, in order
    files: tuple[str, ...] = ()  # what save_state writes from this rank (FSDP2's sharded state dict)


@dataclass
class PlanCheck:
    """The outcome of :func:`check_plan`: the sizes, each rank's set-up and every problem found."""

    sizes: dict[str, int]
    world_size: int
    ranks: list[RankSetup] = field(default_factory=list)
    set_up: list[int] = field(default_factory=list)  # the ranks whose whole set-up ran
    problems: list[str] = field(default_factory=list)
    estimate: MemoryEstimate | None = None
    reshard: ReshardPlan | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """A few lines: the layout, what was checked, and each problem (or that there were none)."""
        ep = self.sizes.get("ep", 1)  # carved from dp_shard: said with it, no rank of its own
        named = (
            " x ".join(
                f"{dim}={size}" + (f" (ep={ep})" if dim == "dp_shard" and ep > 1 else "")
                for dim, size in self.sizes.items()
                if size > 1 and dim != "ep"
            )
            or "one process"
        )
        dp = len({setup.data_parallel_index for setup in self.ranks})
        lines = [
            f"Plan check: {named} on {self.world_size} ranks (fake process group)",
            f"  device mesh and sub-meshes built on {len(self.set_up)} of {self.world_size} ranks (every rank's place "
            f"checked in it); {dp} data-parallel groups; "
            f"epoch of {sum(len(s.samples) for s in self.ranks if _reads_for_its_group(s))} samples sharded",
        ]  # fmt: skip
        if self.ranks:
            files = sum(len(setup.files) for setup in self.ranks)
            lines.append(
                f"  checkpoint: {files} files, {len(self.ranks[-1].files)} from each rank (rank 0 adds "
                f"{len(self.ranks[0].files) - len(self.ranks[-1].files)} shared ones)"
            )
        if self.reshard is not None:
            lines.append(f"  {self.reshard.summary()}")
        if self.estimate is not None:
            lines.append(
                f"  memory: peak {self.estimate.peak / 1e9:.2f} GB per rank (rank {self.estimate.peak_rank})"
            )
        lines += [f"  problem: {problem}" for problem in self.problems] or ["  no problems found"]
        return "\n".join(lines)


def _reads_for_its_group(setup: RankSetup) -> bool:
    """The first rank of its data-parallel group (every rank along pp, cp, sp and tp reads the same)."""
    return all(setup.coordinate.get(dim, 0) == 0 for dim in ("pp", "cp", "sp", "tp"))


def _expected_group(rank: int, dim: str, sizes: dict[str, int]) -> list[int]:
    """The ranks that differ from ``rank`` only along ``dim`` in a row-major mesh, in mesh order."""
    stride = math.prod(sizes[d] for d in _DIMS[_DIMS.index(dim) + 1 :])
    start = rank - ((rank // stride) % sizes[dim]) * stride
    return [start + i * stride for i in range(sizes[dim])]


def _real_setup(
    rank: int, world_size: int, sizes: dict[str, int], problems: list[str], ep: int = 1
) -> tuple[Any, int]:
    """Rank ``rank``'s own set-up on the fake process group: its mesh coordinate, its group along every
    dimension and its place in the flattened ``dp`` mesh, checked against the row-major layout.

    Returns the full mesh (every rank's place, as torch laid it out) and the FSDP2 group's size.
    """
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from accelerate.backends.parallel.fsdp import fsdp_mesh

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        config = _config(sizes, world_size, ep)
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
        shard = sizes["dp_shard"] * sizes["cp"] * sizes["sp"]
        want = shard * sizes["dp_replicate"] if config.shard_dim_names else None
        if want is not None and fsdp_size != want:
            problems.append(f"rank {rank}: FSDP2 shards over {fsdp_size} ranks, the layout says {want}")
        if config.ep_enabled:
            _check_expert_mesh(rank, config, problems)
        full = mesh.mesh.clone() if mesh is not None else None
    finally:
        dist.destroy_process_group()
    return full, fsdp_size


def _check_expert_mesh(rank: int, config: Any, problems: list[str]) -> None:
    """The expert mesh the strategy builds for ``ep`` (``backends/parallel/experts.py``): the rank's ``ep``
    group is its ``ep`` neighbours within dp_shard (they exchange tokens), its ``ep_replicate`` group the
    ranks at the same place of every other expert group (they hold the same experts)."""
    from accelerate.backends.parallel.experts import expert_mesh

    ep = int(config.ep_size)
    mesh = expert_mesh(config, "cpu")
    dp_index = config.data_parallel_index(rank)
    want = {
        "ep": [dp_index - dp_index % ep + i for i in range(ep)],
        "ep_replicate": [dp_index % ep + i * ep for i in range(config.data_parallel_size // ep)],
    }
    for dim, members in want.items():
        got = mesh[dim].mesh.flatten().tolist()
        if got != members:
            problems.append(f"rank {rank}: its {dim} group is {got}, not {members}")
    if mesh["ep"].get_local_rank() != config.coordinates(rank)["ep"]:
        problems.append(f"rank {rank}: holds the experts of ep rank {mesh['ep'].get_local_rank()}, not "
                        f"{config.coordinates(rank)['ep']}")  # fmt: skip


def _config(sizes: dict[str, int], world_size: int, ep: int = 1) -> Any:
    from accelerate.state.parallelism import ParallelismConfig

    config = ParallelismConfig(
        dp_replicate_size=sizes["dp_replicate"], dp_shard_size=sizes["dp_shard"], tp_size=sizes["tp"],
        cp_size=sizes["cp"], sp_size=sizes["sp"], pp_size=sizes["pp"], ep_size=ep,
    )  # fmt: skip
    config.validate(world_size)
    if sizes["cp"] > 1:
        # Context parallelism is refused on CPU for its ring-attention kernels, which the check never runs:
        # the mesh and the sharding it checks are the ones a CUDA run builds.
        setattr(config, "check_available", lambda device_type=None: None)  # noqa: B010
    return config


def _placed_ranks(full_mesh: Any, config: Any, sizes: dict[str, int], problems: list[str]) -> None:
    """Every rank's coordinate in the mesh torch built, against the layout's (the ranks not set up)."""
    if full_mesh is None:
        return
    names = [dim for dim in _DIMS if sizes[dim] > 1]
    world_size = math.prod(sizes.values())
    flat = full_mesh.reshape(-1).tolist()
    if sorted(flat) != list(range(world_size)):
        problems.append(
            f"the device mesh holds ranks {sorted(set(flat))[:8]}..., not each of 0-{world_size - 1} once"
        )
        return
    shape = [sizes[dim] for dim in names]
    for position, rank in enumerate(flat):
        coordinate, rest = {}, position
        for dim, size in zip(reversed(names), reversed(shape), strict=True):
            coordinate[dim], rest = rest % size, rest // size
        placed = {dim: coordinate[dim] for dim in names}
        expected = {dim: config.coordinates(rank)[dim] for dim in names}
        if placed != expected:
            problems.append(f"rank {rank}: the device mesh puts it at {placed}, the layout at {expected}")


def _samples(
    rank: int, config: Any, dataset_size: int, batch_size: int, seed: int
) -> tuple[int, tuple[int, ...]]:
    from torch.utils.data import DataLoader

    from accelerate.data.prepare import prepare_data_loader

    dp_index = config.data_parallel_index(rank)
    loader: DataLoader[int] = DataLoader(range(dataset_size), batch_size=batch_size)  # type: ignore[arg-type]
    prepared = prepare_data_loader(loader, device="cpu", num_processes=config.data_parallel_size,
                                   process_index=dp_index, data_seed=seed)  # fmt: skip
    batches: Any = prepared.batch_sampler  # the rank's BatchSamplerShard: index lists, no data loaded
    return dp_index, tuple(int(i) for batch in batches for i in batch)


def setup_ranks(world_size: int, limit: int) -> list[int]:
    """The ranks whose whole set-up runs: all of them up to ``limit``, else ``limit`` spread evenly
    (the first and last included). torch builds every sub-group on every rank, so one rank's mesh
    costs time in proportion to the world size and all of them its square; the others are checked
    against the mesh torch built (:func:`_placed_ranks`)."""
    if world_size <= limit:
        return list(range(world_size))
    step = (world_size - 1) / (limit - 1)
    return sorted({round(i * step) for i in range(limit)})


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
               batch_size: int = 2, seed: int = 0, estimate: MemoryEstimate | None = None,
               setup_limit: int = 256, reshard_to: dict[str, int] | None = None) -> PlanCheck:  # fmt: skip
    """Runs every rank's set-up for ``sizes`` (``ParallelismConfig`` sizes by dimension name) on the
    fake process group and reports what disagrees with the layout.

    Args:
        sizes: ``{"dp_replicate": 8, "dp_shard": 16, "tp": 8}``; unnamed dimensions are 1. ``"ep"``
            (expert parallelism, carved from dp_shard) adds no rank; its expert mesh is built and checked.
        world_size: the ranks to check (default: the product of ``sizes``).
        dataset_size: samples in the epoch to shard (default: two batches per data-parallel group).
        batch_size: the per-rank batch size of the loader.
        seed: the shuffling seed every rank's sampler shares.
        estimate: a memory estimate to report with the check.
        setup_limit: ranks whose whole set-up (device mesh, sub-meshes, FSDP2 mesh) runs on the fake
            process group; past it that many, spread evenly, run it and every rank is checked against
            the mesh torch built (a mesh costs each rank time in proportion to the world size).
            Every rank's data sharding runs either way.
        reshard_to: another layout's sizes: plan which saved shards each of its ranks reads of the
            checkpoint this layout writes (:func:`~accelerate.planning.checkpoint_plan.reshard_plan`).

    Example:
        >>> check = check_plan({"dp_replicate": 2, "dp_shard": 2, "tp": 2})
        >>> check.ok, len(check.ranks)
        (True, 8)
    """
    full = {dim: int(sizes.get(dim, 1)) for dim in _DIMS}
    ep = int(sizes.get("ep", 1))
    unknown = set(sizes) - set(_DIMS) - {"ep"}
    if unknown:
        raise ValueError(
            f"check_plan(sizes=...) names unknown dimensions {sorted(unknown)}; use {', '.join(_DIMS)} or ep."
        )
    world = math.prod(full.values()) if world_size is None else world_size
    data_parallel = full["dp_replicate"] * full["dp_shard"]
    dataset_size = 2 * batch_size * data_parallel if dataset_size is None else dataset_size
    check = PlanCheck({**full, "ep": ep} if ep > 1 else full, world, estimate=estimate)
    if math.prod(full.values()) != world:
        check.problems.append(
            f"the sizes multiply to {math.prod(full.values())} ranks, not world_size={world}"
        )
        return check
    fsdp_size, full_mesh = 1, None
    check.set_up = setup_ranks(world, setup_limit)
    for rank in check.set_up:
        full_mesh, fsdp_size = _real_setup(rank, world, full, check.problems, ep)
    config = _config(full, world, ep)
    if len(check.set_up) < world:
        _placed_ranks(full_mesh, config, full, check.problems)
    for rank in range(world):
        dp_index, samples = _samples(rank, config, dataset_size, batch_size, seed)
        check.ranks.append(
            RankSetup(rank, config.coordinates(rank), dp_index, fsdp_size, samples, rank_files(rank))
        )
    _check_epoch(check, dataset_size)
    written = [path for setup in check.ranks for path in setup.files]
    if len(written) != len(set(written)):
        check.problems.append("two ranks would write the same checkpoint file")
    if reshard_to is not None:
        check.reshard = reshard_plan(full, reshard_to)
        check.problems += check.reshard.problems
    return check
