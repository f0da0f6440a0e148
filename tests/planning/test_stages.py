"""Pipeline stages and sequence parallelism in the estimate: what each stage holds, what sp splits."""

from __future__ import annotations

import pytest

from accelerate.planning import ModelShape, RunLayout, estimate_memory
from accelerate.planning.estimate import activation_bytes
from accelerate.planning.stages import in_flight, stage_layers, stage_parameters

# 8 blocks of 100 parameters, a 1,000-parameter embedding and a 1,000-parameter head.
SHAPE = ModelShape("m", 2800, 100, hidden_size=10, num_layers=8, num_heads=2, num_kv_heads=2,
                   intermediate_size=40, vocab_size=100)  # fmt: skip


def test_blocks_split_evenly_the_ends_stay_on_the_first_and_last_stage() -> None:
    assert [stage_layers(8, 3, s) for s in range(3)] == [3, 3, 2]
    layout = RunLayout(world_size=4, pp=4, dp_shard=1)
    assert [stage_parameters(SHAPE, layout, s) for s in range(4)] == [1200, 200, 200, 1200]
    # Tensor parallelism splits the blocks and the head, not the embedding.
    assert stage_parameters(SHAPE, RunLayout(world_size=4, pp=2, tp=2, dp_shard=1), 0) == 1000 + 200
    assert stage_parameters(SHAPE, RunLayout(world_size=4, pp=2, tp=2, dp_shard=1), 1) == 200 + 500


@pytest.mark.parametrize(
    ("schedule", "held"), [("GPipe", [4, 4]), ("1F1B", [2, 1]), ("Interleaved1F1B", [2, 1])]
)
def test_each_schedule_holds_its_micro_batches_in_flight(schedule: str, held: list[int]) -> None:
    layout = RunLayout(world_size=2, pp=2, dp_shard=1, pp_schedule=schedule, pp_microbatches=4)
    assert [in_flight(layout, stage) for stage in (0, 1)] == held


def test_every_rank_of_a_stage_is_one_group_and_the_last_stage_holds_the_logits() -> None:
    layout = RunLayout(world_size=8, dp_shard=2, pp=2, tp=2, sequence_length=64)
    estimate = estimate_memory(SHAPE, layout)
    # Rank order is dp_replicate, dp_shard, pp, cp, sp, tp: ranks 0, 1, 4, 5 are stage 0.
    assert sorted(group.ranks for group in estimate.groups) == [(0, 1, 4, 5), (2, 3, 6, 7)]
    first, last = (activation_bytes(SHAPE, estimate.layout, stage) for stage in (0, 1))
    assert last > first / 2  # one micro-batch, but the logits and their gradients
    assert "pp=2 x tp=2 (1F1B, 2 micro-batches) (FSDP)" in estimate.layout.describe()


def test_sequence_parallelism_splits_the_tokens_and_shards_over_dp_shard_x_sp() -> None:
    alone = estimate_memory(SHAPE, RunLayout(world_size=2, dp_shard=2, sequence_length=64)).groups[0].memory
    ulysses = estimate_memory(SHAPE, RunLayout(world_size=4, dp_shard=2, sp=2, sequence_length=64))
    memory = ulysses.groups[0].memory
    assert memory.activations == activation_bytes(SHAPE, RunLayout(dp_shard=1, sequence_length=32))
    assert memory.parameters == alone.parameters // 2  # FSDP shards over dp_shard x sp
    with pytest.raises(ValueError, match="does not compose with tensor or context parallelism"):
        estimate_memory(SHAPE, RunLayout(world_size=4, sp=2, tp=2))


def test_the_schedules_are_parallelism_configs() -> None:
    from accelerate.planning.layout import PIPELINE_SCHEDULES
    from accelerate.state.pipeline_options import PIPELINE_SCHEDULES as CONFIG_SCHEDULES

    assert tuple(CONFIG_SCHEDULES) == PIPELINE_SCHEDULES


def test_a_pipeline_rank_holds_only_its_stages_weights() -> None:
    # The pipeline frees the other stages' weights once the model is cut: parameters, gradients and
    # optimizer states are all the stage's.
    estimate = estimate_memory(SHAPE, RunLayout(world_size=4, pp=4, dp_shard=1, sequence_length=8))
    first = next(group.memory for group in estimate.groups if group.ranks == (0,))
    assert first.parameters == 1200 * 4 and first.gradients == 1200 * 4 and first.optimizer_states == 1200 * 8
    assert any("its stage's weights only" in note for note in estimate.notes)
