"""``accelerate estimate-memory`` with run options: the per-rank table, --json, --max_memory, offline sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelerate.commands.accelerate_cli import main

LLAMA_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
            "tie_word_embeddings": False}  # fmt: skip
QUESTION = ["--dp_shard_size", "8", "--tp_size", "2", "--mixed_precision", "bf16", "--micro_batch_size", "4",
            "--sequence_length", "4096", "--max_memory", "80GB"]  # fmt: skip


@pytest.fixture
def llama(tmp_path: Path) -> str:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B))
    return str(tmp_path)


def test_the_issue_question_gets_a_table_and_the_layouts_that_fit(
    llama: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["estimate-memory", llama, *QUESTION]) == 0
    out = capsys.readouterr().out
    assert "8.03B parameters" in out and "dp_shard=8 x tp=2 (FSDP) on 16 rank(s)" in out
    for column in ("parameters", "gradients", "optimizer states", "activations", "comm. buffers", "total"):
        assert column in out
    # Not without activation checkpointing: the logits, gathered whole under tp, take 29 GB of 103.
    assert "Peak: 102.63 GB" in out and "does not fit in 80.0 GB per rank: 22.63 GB over" in out
    assert "dp_shard=2 x tp=8 (FSDP)       77.75 GB" in out
    assert "Layouts of 16 ranks that fit, least communication per step first:" in out


def test_json_output_carries_each_rank_group_and_the_verdict(
    llama: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["estimate-memory", llama, *QUESTION, "--json", "--max_memory", "20GB"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["layout"]["dp_shard"] == 8 and data["ranks"][0]["ranks"] == "0-15"
    assert data["fits"] is False and data["margin"] < 0
    assert all(fit["peak"] <= 20 * 10**9 for fit in data["layouts_that_fit"])


def test_without_run_options_the_upstream_table_is_printed(
    llama: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["estimate-memory", llama, "--dtypes", "float32"]) == 0
    out = capsys.readouterr().out
    assert "Memory Usage for loading" in out and "Training using Adam" in out and "Peak" not in out


def test_sizes_that_do_not_divide_are_an_error_naming_them(
    llama: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["estimate-memory", llama, "--world_size", "8", "--tp_size", "3"]) == 2
    assert "tp=3" in capsys.readouterr().err


def test_pipeline_and_sequence_sizes_give_one_row_per_stage(
    llama: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["estimate-memory", llama, "--pp_size", "4", "--tp_size", "8", "--dp_shard_size", "4", "--pp_schedule",
            "GPipe", "--pp_microbatches", "8", "--mixed_precision", "bf16", "--json"]  # fmt: skip
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    # A row per stage, the two middle stages (the same blocks, all 8 micro-batches under GPipe) as one.
    assert data["layout"]["pp"] == 4 and [row["ranks"][-10:] for row in data["ranks"]] == [
        "(32 ranks)", "(64 ranks)", "(32 ranks)"
    ]  # fmt: skip
    assert data["ranks"][0]["ranks"].startswith("0,1,2,3,4,5,6,7,...")
    assert main(["estimate-memory", llama, "--sp_size", "4", "--dp_shard_size", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"]["sp"] == 4
    assert (
        main(["estimate-memory", llama, "--zero_stage", "2", "--world_size", "8", "--zero_bucket_size", "16"])
        == 0
    )
    assert "ZeRO-2" in capsys.readouterr().out


QWEN3_MOE_30B = {"model_type": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
                 "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
                 "num_key_value_heads": 4, "num_experts": 128, "num_experts_per_tok": 8}  # fmt: skip


def test_ep_size_splits_a_moe_configs_experts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_MOE_30B))
    args = ["estimate-memory", str(tmp_path), "--dp_shard_size", "16", "--mixed_precision", "bf16",
            "--sequence_length", "4096", "--json"]  # fmt: skip
    assert main([*args, "--ep_size", "8"]) == 0
    with_ep = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    without = json.loads(capsys.readouterr().out)
    assert with_ep["layout"]["ep"] == 8 and with_ep["model"]["num_experts"] == 128
    assert "each rank holds 16 of 128 experts per layer" in with_ep["notes"][0]
    # The experts are all but 4% of the weights: each rank's share is the same (all of dp_shard holds a
    # sixteenth either way); FSDP gathers only the block's other weights and its 16 local experts.
    assert with_ep["ranks"][0]["parameters"] == pytest.approx(without["ranks"][0]["parameters"], rel=0.01)
    assert with_ep["ranks"][0]["communication_buffers"] < without["ranks"][0]["communication_buffers"]
    capsys.readouterr()
    assert main(["estimate-memory", str(tmp_path), "--dp_shard_size", "6", "--ep_size", "3"]) == 2
    assert "num_experts=128, which does not divide over 3 ranks" in capsys.readouterr().err


def test_plain_ddp_is_dp_replicate_and_a_world_size_alone_is_fsdp(
    llama: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # What Accelerator() runs on 2 processes without a parallelism config: DDP, buckets as big as the
    # gradients (tests/planning/test_validation_ddp.py measures it).
    assert main(["estimate-memory", llama, "--dp_replicate_size", "2", "--json"]) == 0
    ddp = json.loads(capsys.readouterr().out)
    memory = ddp["ranks"][0]
    assert ddp["layout"]["dp_shard"] == 1 and memory["communication_buffers"] == memory["gradients"]
    assert main(["estimate-memory", llama, "--dp_replicate_size", "2"]) == 0
    assert "dp_replicate=2 (DDP) on 2 rank(s)" in capsys.readouterr().out
    assert main(["estimate-memory", llama, "--world_size", "2"]) == 0
    assert "dp_shard=2 (FSDP) on 2 rank(s)" in capsys.readouterr().out
