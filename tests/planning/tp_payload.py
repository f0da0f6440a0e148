"""Rank functions for the tensor-parallel memory validation (top-level: the pool sends them by name)."""

from __future__ import annotations

from typing import Any

import torch

from tests.planning.allocations import live_peak
from tests.planning.test_validation import _live_bytes

CONFIG = {
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 512,
}  # fmt: skip


def apply_llama_tp(model: Any, mesh: Any) -> None:
    """transformers' Llama tensor-parallel plan by hand: q/k/v and gate/up split by columns, o and down
    by rows, the LM head by columns with its output gathered, the embedding replicated."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan: dict[str, Any] = {"lm_head": ColwiseParallel(output_layouts=Replicate())}
    for i in range(len(model.model.layers)):
        prefix = f"model.layers.{i}."
        for name in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
        ):
            plan[prefix + name] = ColwiseParallel()
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            plan[prefix + name] = RowwiseParallel()
    parallelize_module(model, mesh, plan)


def _local(tensors: Any) -> list[torch.Tensor]:
    from torch.distributed.tensor import DTensor

    return [t.to_local() if isinstance(t, DTensor) else t for t in tensors]


def tp_peak(batch: int, sequence: int) -> dict[str, int]:
    """One rank's measured peak of a tp=2 AdamW step (as test_validation measures) and the estimate."""
    import transformers

    from accelerate import Accelerator
    from accelerate.planning import RunLayout, estimate_memory
    from accelerate.planning.shapes import shape_of_module
    from accelerate.state.parallelism import ParallelismConfig

    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(tp_size=2))
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))
    shape = shape_of_module(model)
    apply_llama_tp(model, accelerator.torch_device_mesh["tp"])
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    ids = torch.randint(
        0, CONFIG["vocab_size"], (batch, sequence), generator=torch.Generator().manual_seed(1)
    )

    peak = _step_peak(lambda: model(input_ids=ids, labels=ids).loss, accelerator, model, optimizer)
    layout = RunLayout(world_size=2, tp=2, micro_batch_size=batch, sequence_length=sequence)
    return {"measured": peak, "estimated": estimate_memory(shape, layout).peak}


def nd_peak(sizes: dict[str, int], batch: int, sequence: int) -> dict[str, int]:
    """One rank's measured peak of an AdamW step of the Llama under ``ParallelismConfig(**sizes)`` (the
    tensor-parallel plan applied by hand when ``tp_size > 1``; FSDP2 over dp_shard by ``prepare``) and the
    estimate for the same layout."""
    import gc

    import transformers

    from accelerate import Accelerator
    from accelerate.planning import RunLayout, estimate_memory
    from accelerate.planning.shapes import shape_of_module
    from accelerate.state.parallelism import ParallelismConfig
    from accelerate.utils import FullyShardedDataParallelPlugin

    gc.collect()  # what earlier calls left in this worker is not this step's
    torch.manual_seed(0)
    # FSDP2 shards each decoder block on its own, as the estimate assumes (without a wrap policy only
    # the root is sharded, and the whole model is gathered at once).
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["LlamaDecoderLayer"],
    )  # fmt: skip
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(**sizes), fsdp_plugin=plugin)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))
    shape = shape_of_module(model)
    if sizes.get("tp_size", 1) > 1:
        apply_llama_tp(model, accelerator.torch_device_mesh["tp"])
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    ids = torch.randint(
        0, CONFIG["vocab_size"], (batch, sequence), generator=torch.Generator().manual_seed(1)
    )
    peak = _step_peak(lambda: model(input_ids=ids, labels=ids).loss, accelerator, model, optimizer)
    layout = RunLayout(
        world_size=accelerator.num_processes, dp_shard=sizes.get("dp_shard_size"), tp=sizes.get("tp_size", 1),
        micro_batch_size=batch, sequence_length=sequence,
    )  # fmt: skip
    return {"measured": peak, "estimated": estimate_memory(shape, layout).peak}


def _step_peak(loss: Any, accelerator: Any, model: Any, optimizer: Any) -> int:
    """The third step's peak, as test_validation measures it."""

    def step() -> None:
        accelerator.backward(loss())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    step()
    states = [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    before = _live_bytes(_local(model.parameters())) + _live_bytes(_local(states))
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        step()
    return before + live_peak(prof.profiler.kineto_results.experimental_event_tree())  # type: ignore[union-attr]
