"""The plan checker at scale: every rank's real set-up on torch's fake process group, in one process."""

from __future__ import annotations

import pytest

from accelerate.planning import ModelShape, RunLayout, estimate_memory
from accelerate.planning.check import check_plan


@pytest.mark.parametrize(
    "sizes",
    [
        {"dp_replicate": 4, "dp_shard": 4, "tp": 4},  # 64 ranks
        {"dp_shard": 64},  # 64 ranks of plain FSDP
        {"dp_replicate": 4, "dp_shard": 8, "tp": 8},  # 256 ranks
        {"dp_replicate": 8, "dp_shard": 16, "tp": 8},  # 1,024 ranks: 128 nodes of 8
        {"dp_replicate": 8, "dp_shard": 8, "pp": 2, "tp": 8},  # 1,024 ranks with two pipeline stages
        {"dp_shard": 16, "pp": 4, "tp": 4},  # 256 ranks
        {"dp_shard": 16, "sp": 4},  # 64 ranks of Ulysses (FSDP shards over dp_shard x sp)
        {"dp_replicate": 2, "dp_shard": 8, "cp": 4},  # 64 ranks of context parallelism (a CUDA run's mesh)
    ],
    ids=lambda sizes: "x".join(f"{k}{v}" for k, v in sizes.items()),
)
def test_every_rank_of_an_n_d_layout_sets_up_as_planned(sizes: dict[str, int]) -> None:
    check = check_plan(sizes, batch_size=2)
    assert check.problems == []
    world = check.world_size
    assert len(check.ranks) == world
    data_parallel = sizes.get("dp_replicate", 1) * sizes["dp_shard"]
    assert len({setup.data_parallel_index for setup in check.ranks}) == data_parallel
    # The epoch: each data-parallel group read 2 batches of 2; every sample exactly once overall.
    assert all(len(setup.samples) == 4 for setup in check.ranks)
    tp, pp = sizes.get("tp", 1), sizes.get("pp", 1)
    assert all(setup.fsdp_group_size == world // tp // pp for setup in check.ranks)
    last = check.ranks[-1]
    assert last.coordinate["tp"] == tp - 1 and last.data_parallel_index == data_parallel - 1
    assert last.coordinate["pp"] == pp - 1
    assert f"epoch of {4 * data_parallel} samples sharded" in check.summary()


def test_an_epoch_that_does_not_divide_is_reported_with_the_fix() -> None:
    check = check_plan({"dp_shard": 4}, dataset_size=13)
    assert not check.ok
    assert (
        "3 samples are read twice" in check.problems[0]
        and "multiple of data-parallel size" in check.problems[0]
    )


def test_sizes_that_do_not_make_the_world_size_are_a_problem_not_a_crash() -> None:
    check = check_plan({"dp_shard": 4, "tp": 2}, world_size=16)
    assert check.problems == ["the sizes multiply to 8 ranks, not world_size=16"] and check.ranks == []
    with pytest.raises(ValueError, match="unknown dimensions \\['xp'\\]"):
        check_plan({"xp": 2})


def test_the_summary_carries_the_memory_estimate() -> None:
    estimate = estimate_memory(ModelShape("m", 10**9, 10**7), RunLayout(world_size=8, tp=2))
    summary = check_plan({"dp_shard": 4, "tp": 2}, estimate=estimate).summary()
    assert (
        "dp_shard=4 x tp=2 on 8 ranks" in summary
        and "memory: peak" in summary
        and "no problems found" in summary
    )


def test_past_the_setup_limit_a_spread_of_ranks_runs_the_set_up_and_every_rank_is_placed() -> None:
    check = check_plan({"dp_shard": 4, "tp": 4}, setup_limit=5)
    assert check.ok and check.set_up == [0, 4, 8, 11, 15] and len(check.ranks) == 16
    assert "built on 5 of 16 ranks" in check.summary()


def test_a_mesh_that_misplaces_a_rank_is_reported() -> None:
    import torch

    from accelerate.planning.check import _config, _placed_ranks

    sizes = {"dp_replicate": 1, "dp_shard": 2, "pp": 1, "cp": 1, "sp": 1, "tp": 2}
    problems: list[str] = []
    swapped = torch.tensor([[0, 2], [1, 3]])  # tp neighbours across the dp_shard dimension
    _placed_ranks(swapped, _config(sizes, 4), sizes, problems)
    assert (
        problems[0]
        == "rank 2: the device mesh puts it at {'dp_shard': 0, 'tp': 1}, the layout at {'dp_shard': 1, 'tp': 0}"
    )
