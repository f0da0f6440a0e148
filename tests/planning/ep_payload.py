"""Rank functions for the expert-parallel memory validation (top-level: the pool sends them by name)."""

from __future__ import annotations

import torch

from tests.planning.tp_payload import _step_peak

# A tiny Qwen3-MoE: 8 experts of 128 per layer, each token to 2 of them; the experts are 3/4 of its weights.
CONFIG = {
    "vocab_size": 512, "hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 128,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "num_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 512,
}  # fmt: skip


def moe_peak(sizes: dict[str, int], batch: int, sequence: int) -> dict[str, int]:
    """One rank's measured peak of an AdamW step of the tiny Qwen3-MoE under ``sizes`` (as
    test_validation measures: the allocator's live bytes in the third step plus the local parameters
    and optimizer states before it) and the estimate for the same layout."""
    import gc

    import transformers

    from accelerate import Accelerator
    from accelerate.planning import RunLayout, estimate_memory
    from accelerate.planning.shapes import shape_of_module
    from accelerate.state.parallelism import ParallelismConfig

    gc.collect()  # what earlier calls left in this worker is not this step's
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(**sizes))
    model = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**CONFIG))
    shape = shape_of_module(model)
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    rank = accelerator.process_index  # each rank its own batch: the router sends its tokens its own way
    ids = torch.randint(
        0, CONFIG["vocab_size"], (batch, sequence), generator=torch.Generator().manual_seed(1 + rank)
    )
    peak = _step_peak(lambda: model(input_ids=ids, labels=ids).loss, accelerator, model, optimizer)
    layout = RunLayout(
        world_size=accelerator.num_processes, dp_replicate=sizes.get("dp_replicate_size", 1),
        dp_shard=sizes.get("dp_shard_size"), ep=sizes.get("ep_size", 1), micro_batch_size=batch,
        sequence_length=sequence,
    )  # fmt: skip
    return {"measured": peak, "estimated": estimate_memory(shape, layout).peak}
