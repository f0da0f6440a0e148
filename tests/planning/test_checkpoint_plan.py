"""The checkpoint files of each rank and the reshard plan to another layout, at 1,024 ranks."""

from __future__ import annotations

import pytest
import torch

from accelerate.planning.check import check_plan
from accelerate.planning.checkpoint_plan import chunk_rows, rank_files, reshard_plan

BIG = {"dp_replicate": 8, "dp_shard": 16, "tp": 8}  # 1,024 ranks


@pytest.mark.parametrize(("rows", "shards"), [(4096, 16), (10, 4), (3, 8), (1000, 7)])
def test_shards_split_rows_as_torch_chunk_does(rows: int, shards: int) -> None:
    chunks = torch.arange(rows).chunk(shards)
    expected = [(int(c[0]), int(c[-1]) + 1) for c in chunks] + [(rows, rows)] * (shards - len(chunks))
    assert chunk_rows(rows, shards) == expected


def test_every_rank_writes_its_own_dcp_files_and_rank_0_the_shared_ones() -> None:
    assert rank_files(5) == (
        "pytorch_model_fsdp_0/__5_0.distcp",
        "optimizer_0/__5_0.distcp",
        "random_states_5.pkl",
    )
    assert set(rank_files(0)) >= {
        "pytorch_model_fsdp_0/.metadata", "optimizer_0/.metadata", "dl_state_dict.bin", "accelerate_manifest.json",
    }  # fmt: skip


def test_1024_to_512_ranks_halving_dp_shard_reads_two_saved_shards_per_rank() -> None:
    plan = reshard_plan(BIG, {"dp_replicate": 8, "dp_shard": 8, "tp": 8}, rows=4096)
    assert plan.problems == [] and len(plan.reads) == 512
    # New rank 8 is dp_shard 1, tp 0: rows 512-1024, saved as shards 2 and 3 (256 rows each) of tp 0,
    # which old ranks 16 and 24 (dp_replicate 0) held, with their replicas 128 ranks apart.
    first, second = plan.reads[8]
    assert (first.old_shard, first.start, first.stop) == (2, 512, 768)
    assert (second.old_shard, second.start, second.stop) == (3, 768, 1024)
    assert first.old_ranks == tuple(16 + 128 * i for i in range(8))
    assert "reshard 1024 -> 512 ranks" in plan.summary() and "at most 2 saved shards" in plan.summary()


def test_1024_to_512_ranks_halving_dp_replicate_reads_one_shard_each() -> None:
    plan = reshard_plan(BIG, {"dp_replicate": 4, "dp_shard": 16, "tp": 8})
    assert plan.problems == [] and all(len(reads) == 1 for reads in plan.reads.values())


def test_uneven_shards_are_covered_exactly_and_a_tp_change_is_refused_with_the_fix() -> None:
    plan = reshard_plan({"dp_shard": 7}, {"dp_shard": 3, "cp": 2}, rows=1000)
    assert plan.problems == []
    assert sum(r.stop - r.start for reads in plan.reads.values() for r in reads) == 1000
    with pytest.raises(
        ValueError, match="tp changes from 8 to 4, which re-splits the other dimension too; keep tp the same"
    ):
        reshard_plan(BIG, {"dp_shard": 128, "tp": 4})


def test_the_1024_rank_check_lists_the_files_and_the_reshard_plan() -> None:
    check = check_plan(BIG, reshard_to={"dp_replicate": 8, "dp_shard": 8, "tp": 8})
    assert check.ok, check.problems
    assert check.ranks[1023].files[0] == "pytorch_model_fsdp_0/__1023_0.distcp"
    summary = check.summary()
    assert "checkpoint: 3076 files, 3 from each rank (rank 0 adds 4 shared ones)" in summary
    assert "reshard 1024 -> 512 ranks (dp_replicate=8 x dp_shard=8 x tp=8)" in summary


def test_a_pipeline_reshards_within_each_stage_and_refuses_a_pp_change() -> None:
    # 1,024 ranks with two stages -> 512: dp_shard 8 -> 4; each new rank reads the two saved shards of
    # its own stage and tensor-parallel slice.
    old = {"dp_replicate": 8, "dp_shard": 8, "pp": 2, "tp": 8}
    plan = reshard_plan(old, {"dp_replicate": 8, "dp_shard": 4, "pp": 2, "tp": 8}, rows=4096)
    assert plan.problems == [] and len(plan.reads) == 512
    reads = plan.reads[8 + 3]  # new rank 11: dp_shard 0, pp 1, tp 3
    assert [r.old_shard for r in reads] == [0, 1] and reads[0].old_ranks[0] == 8 + 3  # old pp 1, tp 3
    with pytest.raises(ValueError, match="pp changes from 2 to 4, which re-cuts the pipeline's stages"):
        reshard_plan(old, {"dp_replicate": 4, "dp_shard": 4, "pp": 4, "tp": 8})
