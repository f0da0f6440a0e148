"""Mixture of experts in the estimate: MoE shapes read offline, ep's split of the experts, its checks."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from accelerate.planning import ModelShape, RunLayout, estimate_memory, layouts_that_fit
from accelerate.planning.check import check_plan
from accelerate.planning.experts import exchange_buffers, gathered_block
from accelerate.planning.shapes import load_model_shape, shape_from_config, shape_of_module

QWEN3_MOE = {"model_type": "qwen3_moe", "vocab_size": 512, "hidden_size": 128, "intermediate_size": 256,
             "moe_intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 32, "num_experts": 8, "num_experts_per_tok": 2}  # fmt: skip
MIXTRAL = {"model_type": "mixtral", "vocab_size": 512, "hidden_size": 128, "intermediate_size": 96,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 8,
           "num_experts_per_tok": 2}  # fmt: skip
# 1,000 dense parameters and 8,000 of experts (8 per layer, 2 layers); no dimensions: no activations.
MOE = ModelShape("moe", 9000, 4200, num_layers=2, num_experts=8, experts_per_token=2, expert_parameters=8000)


def _built(config: dict[str, object]) -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))


@pytest.mark.parametrize("config", [QWEN3_MOE, MIXTRAL], ids=["qwen3_moe", "mixtral"])
def test_a_moe_config_counts_its_experts_as_transformers_builds_them(config: dict[str, object]) -> None:
    shape, model = shape_from_config(config), _built(config)
    built = shape_of_module(model)  # the experts found by the protocol: the router is not one of them
    assert (
        shape.expert_parameters
        == built.expert_parameters
        == 2 * 8 * 3 * 128 * (64 if "head_dim" in config else 96)
    )
    # Qwen3's per-head q/k norms (128 parameters) are the only difference.
    assert abs(shape.parameters - built.parameters) <= 128
    assert (built.num_experts, built.experts_per_token, built.is_moe) == (8, 2, True)


def test_a_checkpoint_names_its_experts(tmp_path: Path) -> None:
    header = {"model.embed_tokens.weight": {"dtype": "F32", "shape": [10, 4], "data_offsets": [0, 0]}}
    for layer in range(2):
        for expert in range(4):
            header[f"model.layers.{layer}.mlp.experts.{expert}.w1.weight"] = {
                "dtype": "F32", "shape": [6, 4], "data_offsets": [0, 0]
            }  # fmt: skip
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    shape = load_model_shape(str(tmp_path / "model.safetensors"))
    assert (shape.num_experts, shape.expert_parameters, shape.parameters) == (4, 2 * 4 * 24, 40 + 192)


def test_ep_splits_the_experts_over_every_data_parallel_rank_and_the_rest_over_dp_shard() -> None:
    # dp_shard=4 (ep=2): each rank keeps 4 of 8 experts, FSDP-sharded with the other expert group's
    # rank: a quarter; the 1,000 other parameters are sharded over the 4 ranks as usual.
    memory = estimate_memory(MOE, RunLayout(world_size=4, ep=2)).groups[0].memory
    assert (memory.parameters, memory.gradients, memory.optimizer_states) == (
        (250 + 2000) * 4, (250 + 2000) * 4, (250 + 2000) * 8
    )  # fmt: skip
    # dp_replicate=2 x dp_shard=2 (ep=2): HSDP keeps half of the others; the experts still a quarter.
    hsdp = estimate_memory(MOE, RunLayout(world_size=4, dp_replicate=2, ep=2)).groups[0].memory
    assert hsdp.parameters == (500 + 2000) * 4
    # FSDP gathers a block without its experts when every rank holds its own (ep = dp), with their share else.
    assert gathered_block(MOE, RunLayout(world_size=2, ep=2).resolved()) == 200
    assert (
        gathered_block(MOE, RunLayout(world_size=4, ep=2).resolved()) == 200 + 2000
    )  # its 4 local experts of 4,000 parameters, gathered


def test_ep_adds_the_exchange_buffers_and_its_traffic() -> None:
    shape = ModelShape("moe", 9000, 4200, hidden_size=16, num_layers=2, num_experts=8, experts_per_token=2,
                       moe_intermediate_size=8, expert_parameters=8000)  # fmt: skip
    layout = RunLayout(world_size=2, ep=2, micro_batch_size=2, sequence_length=8).resolved()
    assert exchange_buffers(shape, layout, 4) == 2 * (16 * 2) * 16 * 4  # rows sent and received
    with_ep, without = estimate_memory(shape, layout), estimate_memory(shape, RunLayout(world_size=2, micro_batch_size=2,
                                                                                       sequence_length=8))  # fmt: skip
    assert with_ep.communication_per_step != without.communication_per_step
    assert "ep=2: each rank holds 4 of 8 experts per layer" in with_ep.notes[0]
    assert with_ep.layout.describe() == "dp_shard=2 (ep=2) (FSDP)"


@pytest.mark.parametrize(
    ("model", "layout", "match"),
    [
        (MOE, RunLayout(world_size=6, ep=3), "num_experts=8, which does not divide over 3"),
        (MOE, RunLayout(world_size=8, tp=2, ep=2), "composes with dp_shard and dp_replicate only"),
        (MOE, RunLayout(world_size=6, dp_replicate=3, ep=4), "ep is carved from dp_shard"),
        (MOE, RunLayout(world_size=4, zero_stage=2, ep=2), "runs under FSDP2"),
        (
            ModelShape("dense", 1000, 100),
            RunLayout(world_size=2, ep=2),
            "dense has none the estimate knows of",
        ),
    ],
)
def test_what_ep_cannot_do_is_refused_naming_the_fix(
    model: ModelShape, layout: RunLayout, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        estimate_memory(model, layout)


def test_the_layouts_that_fit_keep_ep_and_drop_tp() -> None:
    fits = layouts_that_fit(MOE, RunLayout(world_size=8, ep=4), 10**9)
    assert {fit.layout.describe() for fit in fits} == {
        "dp_shard=8 (ep=4) (FSDP)",
        "dp_replicate=2 x dp_shard=4 (ep=4) (FSDP)",
    }


def test_a_1024_rank_layout_with_ep_checks_every_rank_and_its_expert_mesh() -> None:
    check = check_plan({"dp_replicate": 8, "dp_shard": 128, "ep": 8})
    assert check.ok, check.problems
    assert (
        len(check.ranks) == 1024 and "dp_replicate=8 x dp_shard=128 (ep=8) on 1024 ranks" in check.summary()
    )
    assert [check.ranks[r].coordinate["ep"] for r in (0, 7, 8, 1023)] == [0, 7, 0, 7]
