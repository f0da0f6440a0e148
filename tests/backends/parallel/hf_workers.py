"""Rank functions that tensor-parallelise a tiny transformers Llama (built from its config, no download)."""

from __future__ import annotations

from typing import Any

import torch

from accelerate import Accelerator
from accelerate.state.parallelism import ParallelismConfig

BATCH, SEQ = 4, 6


def tiny_llama_config() -> Any:
    from transformers import LlamaConfig

    # 4 query heads and 2 key/value heads: each of 2 tensor-parallel ranks keeps 2 and 1 (grouped attention).
    return LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=16, tie_word_embeddings=False,
    )  # fmt: skip


def make_llama(seed: int = 0) -> Any:
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(tiny_llama_config())


def llama_tp_plan(model: Any) -> dict[str, Any]:
    """Megatron's split of each decoder layer: q/k/v and gate/up by columns, o and down by rows."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan: dict[str, Any] = {}
    for i in range(len(model.model.layers)):
        for name in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
        ):
            plan[f"model.layers.{i}.{name}"] = ColwiseParallel()
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            plan[f"model.layers.{i}.{name}"] = RowwiseParallel()
    return plan


def batch(seed: int = 3) -> torch.Tensor:
    return torch.randint(0, 32, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))


def train_step(model: Any, optimizer: Any, ids: torch.Tensor, backward: Any) -> None:
    loss = model(input_ids=ids, labels=ids).loss
    backward(loss)
    optimizer.step()
    optimizer.zero_grad()


def reference_state() -> dict[str, torch.Tensor]:
    """One process, the whole batch: the parameters after one SGD step.

    SGD, not AdamW: AdamW's first step is about lr * sign(gradient), so a gradient entry near zero
    turns summation-order noise between topologies into a full-size difference.
    """
    model = make_llama()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    train_step(model, optimizer, batch(), lambda loss: loss.backward())
    return {key: value.detach().clone() for key, value in model.state_dict().items()}


def save_tensor_parallel_llama(sizes: dict[str, int], folder: str) -> dict[str, Any]:
    """Trains one step of a tensor-parallel (and maybe sharded) Llama, then ``save_model`` to ``folder``."""
    from torch.distributed.tensor.parallel import parallelize_module

    config = ParallelismConfig(**sizes)  # type: ignore[arg-type]
    accelerator = Accelerator(cpu=True, parallelism_config=config)
    model = make_llama()
    parallelize_module(model, accelerator.torch_device_mesh["tp"], llama_tp_plan(model))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer = accelerator.prepare(model, optimizer)
    shards, shard = accelerator.state.run.data_shards
    per = BATCH // shards
    train_step(model, optimizer, batch()[shard * per : (shard + 1) * per], accelerator.backward)
    state = accelerator.get_state_dict(model)
    accelerator.save_model(model, folder)
    accelerator.wait_for_everyone()
    return {"state": state}
