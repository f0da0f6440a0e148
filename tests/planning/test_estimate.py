"""The per-rank memory model: each term by hand for small numbers, sharding, offload and the search."""

from __future__ import annotations

import pytest

from accelerate.planning import ModelShape, RunLayout, estimate_memory, layouts_that_fit, parse_memory
from accelerate.planning.report import as_data, render

# Only counts: 1,000 parameters, the largest block 100; no dimensions, so no activations.
TINY = ModelShape("tiny", 1000, 100)


def test_one_process_holds_everything_in_fp32() -> None:
    memory = estimate_memory(TINY, RunLayout()).groups[0].memory
    assert (memory.parameters, memory.gradients, memory.optimizer_states) == (4000, 4000, 8000)
    assert (memory.activations, memory.communication_buffers) == (0, 0)


def test_ddp_keeps_a_second_copy_of_the_gradients_in_buckets() -> None:
    estimate = estimate_memory(TINY, RunLayout(world_size=4, dp_replicate=4))
    assert estimate.groups[0].memory.communication_buffers == 4000 and len(estimate.groups) == 1
    assert estimate.layout.describe() == "dp_replicate=4 (DDP)"


# DeepSpeed's parameters: the compute-precision copy (whole, or this rank's partition under ZeRO-3)
# and the fp32 master partition.
@pytest.mark.parametrize(("stage", "params", "grads", "states"), [(1, 5336, 4000, 2672), (2, 5336, 1336, 2672),
                                                                  (3, 2672, 1336, 2672)])  # fmt: skip
def test_zero_stages_shard_more_and_the_first_shards_hold_the_remainder(
    stage: int, params: int, grads: int, states: int
) -> None:
    estimate = estimate_memory(TINY, RunLayout(world_size=3, zero_stage=stage))
    first, rest = estimate.groups  # 1,000 = 334 + 333 + 333
    assert first.ranks == (0,) and rest.ranks == (1, 2)
    assert (first.memory.parameters, first.memory.gradients, first.memory.optimizer_states) == (
        params,
        grads,
        states,
    )
    assert estimate.peak_rank == 0


def test_tensor_parallel_ranks_split_the_model_and_share_a_shard() -> None:
    estimate = estimate_memory(TINY, RunLayout(world_size=4, tp=2, dp_shard=2))
    assert estimate.layout.zero_stage == 3  # dp_shard means FSDP
    assert [group.ranks for group in estimate.groups] == [(0, 1, 2, 3)]
    assert estimate.groups[0].memory.parameters == 250 * 4


def test_cpu_offload_moves_the_training_state_to_the_host() -> None:
    memory = estimate_memory(TINY, RunLayout(world_size=2, dp_shard=2, cpu_offload=True)).groups[0].memory
    assert (memory.parameters, memory.gradients, memory.optimizer_states) == (0, 0, 0)
    assert memory.cpu == 2000 + 2000 + 4000


def test_activations_scale_with_tokens_and_shrink_with_checkpointing() -> None:
    shape = ModelShape("m", 10**6, 10**5, hidden_size=64, num_layers=4, num_heads=4, num_kv_heads=4,
                       intermediate_size=256, vocab_size=100)  # fmt: skip
    one = estimate_memory(shape, RunLayout(sequence_length=128)).groups[0].memory.activations
    two = estimate_memory(shape, RunLayout(sequence_length=256)).groups[0].memory.activations
    checkpointed = estimate_memory(shape, RunLayout(sequence_length=128, activation_checkpointing=True))
    assert two == 2 * one and checkpointed.groups[0].memory.activations < one / 2


def test_layouts_that_do_not_multiply_to_the_world_size_are_refused() -> None:
    with pytest.raises(ValueError, match="their product must be the world size"):
        estimate_memory(TINY, RunLayout(world_size=8, dp_shard=3))
    with pytest.raises(ValueError, match="optimizer='lion'"):
        estimate_memory(TINY, RunLayout(optimizer="lion"))


def test_the_layouts_that_fit_come_least_communication_first() -> None:
    shape = ModelShape("m", 10**9, 10**7, hidden_size=1024, num_layers=16, num_heads=16, vocab_size=1000)
    fits = layouts_that_fit(shape, RunLayout(world_size=8, sequence_length=512), 16 * 10**9)
    assert fits and all(fit.peak <= 16 * 10**9 for fit in fits)
    sent = [fit.communication_per_step for fit in fits]
    assert sent == sorted(sent)
    assert all(fit.layout.world_size == 8 for fit in fits)


def test_the_report_says_whether_it_fits_and_by_how_much() -> None:
    estimate = estimate_memory(TINY, RunLayout())
    assert "fits in 1.0 MB per rank, with 984.0 KB to spare" in render(estimate, 10**6, [])
    assert "does not fit in 10.0 KB per rank: 6.0 KB over" in render(estimate, 10**4, [])
    data = as_data(estimate, 10**4, [])
    assert data["fits"] is False and data["margin"] == -6000 and data["ranks"][0]["total"] == 16000


def test_memory_sizes_parse_in_decimal_and_binary_units() -> None:
    assert parse_memory("80GB") == 80 * 10**9 and parse_memory("2 GiB") == 2 * 2**30
    with pytest.raises(ValueError, match="80GB, 80GiB"):
        parse_memory("eighty")


def test_deepspeed_counts_its_master_partition_and_its_full_size_bucket() -> None:
    estimate = estimate_memory(TINY, RunLayout(world_size=2, zero_stage=2, zero_bucket_size=10_000))
    memory = estimate.groups[0].memory
    assert estimate.layout.engine == "deepspeed" and estimate.layout.describe() == "dp_shard=2 (ZeRO-2)"
    assert memory.parameters == 1000 * 4 + 500 * 4  # fp32 parameters and the fp32 master partition
    assert memory.communication_buffers == 10_000 * 4  # the bucket, whatever the model's size
    assert "zero_bucket_size=10,000 elements" in estimate.notes[1]  # after "activations not counted"
    # ZeRO-3 also keeps the whole model gathered and its gradient partition allocated.
    three = estimate_memory(TINY, RunLayout(world_size=2, zero_stage=3, zero_bucket_size=10)).groups[0].memory
    assert three.communication_buffers == 10 * 4 + 1000 * 4 + 500 * 4
    fsdp = estimate_memory(TINY, RunLayout(world_size=2, dp_shard=2))
    assert fsdp.layout.engine == "fsdp" and fsdp.layout.describe() == "dp_shard=2 (FSDP)"
    assert not any("DeepSpeed" in note for note in fsdp.notes)
