"""Workers for the expert-parallel tests: tiny MoE models (one of our own following the experts protocol,
and transformers' Qwen3-MoE from a config) trained under ``ep`` and in one process on the same samples."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

import accelerate.backends.parallel.experts as experts_module
from accelerate import Accelerator
from accelerate.parallelism_config import ParallelismConfig
from tests.backends.parallel.resume_step import load_then_step

HIDDEN, INTER, EXPERTS, VOCAB, SEQ = 16, 24, 4, 32, 8
STEPS, ACCUM, PER_RANK = 2, 2, 2
LR, MOMENTUM, MAX_NORM = 0.1, 0.9, 0.5


class StackedExperts(nn.Module):
    """The experts protocol: ``num_experts``, weights stacked by expert, a routed forward."""

    def __init__(self, num_experts: int = EXPERTS) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.up = nn.Parameter(torch.randn(num_experts, INTER, HIDDEN) * 0.3)
        self.down = nn.Parameter(torch.randn(num_experts, HIDDEN, INTER) * 0.3)

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        out = torch.zeros_like(hidden_states)
        for expert in range(self.num_experts):
            token, slot = torch.where(top_k_index == expert)
            y = nn.functional.silu(hidden_states[token] @ self.up[expert].T) @ self.down[expert].T
            out = out.index_add(0, token, y * top_k_weights[token, slot, None])
        return out


class MoELayer(nn.Module):
    def __init__(self, top_k: int, skew: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(HIDDEN)
        self.router = nn.Linear(HIDDEN, EXPERTS)
        with torch.no_grad():
            self.router.bias[0] += skew  # skew > 0: (almost) every token picks expert 0
        self.experts = StackedExperts()
        self.top_k = top_k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        flat = self.norm(x).reshape(-1, HIDDEN)
        probs = self.router(flat).softmax(-1)
        weights, index = probs.topk(self.top_k, dim=-1)
        # Load balancing (Switch-style): computed from the router alone, untouched by ep.
        load = torch.zeros(EXPERTS).index_add(0, index.reshape(-1), torch.ones(index.numel())) / index.numel()
        aux = EXPERTS * (load * probs.mean(0)).sum()
        return x + self.experts(flat, index, weights).reshape(x.shape), aux


class TinyMoE(nn.Module):
    """Embedding -> 2 MoE layers -> head; loss = next-token cross entropy + 0.01 * load balancing."""

    def __init__(self, top_k: int = 2, skew: float = 0.0) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([MoELayer(top_k, skew) for _ in range(2)])
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.embed(input_ids)
        aux = x.new_zeros(())
        for layer in self.layers:
            x, extra = layer(x)
            aux = aux + extra
        logits = self.head(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))
        return {"loss": loss + 0.01 * aux}


def make_qwen3_moe() -> Any:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, moe_intermediate_size=INTER,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=8, num_experts=EXPERTS,
        num_experts_per_tok=2, output_router_logits=True, router_aux_loss_coef=0.01, max_position_embeddings=64,
    )  # fmt: skip
    config._attn_implementation = "eager"
    return Qwen3MoeForCausalLM(config)


def make_mixtral() -> Any:
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, head_dim=8, num_local_experts=EXPERTS, num_experts_per_tok=2,
        output_router_logits=True, router_aux_loss_coef=0.01, max_position_embeddings=64,
    )  # fmt: skip
    config._attn_implementation = "eager"
    return MixtralForCausalLM(config)


def make(kind: str) -> nn.Module:
    torch.manual_seed(0)
    if kind == "qwen3_moe":
        return make_qwen3_moe()
    if kind == "mixtral":
        return make_mixtral()
    if kind == "skewed":  # top-1, every token to expert 0: the other rank's experts get nothing
        return TinyMoE(top_k=1, skew=50.0)
    return TinyMoE()


def apply_tp(model: nn.Module, kind: str, tp_mesh: Any) -> None:
    """A tensor-parallel plan for the non-expert weights: our model's embedding (rows) and head (columns,
    gathered), a transformers model's attention (q/k/v by heads, o by rows, the per-head norms replicated
    with their gradients summed over tp). The experts stay whole."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    if kind in ("own", "skewed"):
        plan = {
            "embed": RowwiseParallel(input_layouts=Replicate()),
            "head": ColwiseParallel(output_layouts=Replicate()),
        }
    else:
        plan = {}
        for i in range(2):
            for name in ("q_proj", "k_proj", "v_proj"):
                plan[f"model.layers.{i}.self_attn.{name}"] = ColwiseParallel()
            plan[f"model.layers.{i}.self_attn.o_proj"] = RowwiseParallel()
            for name in ("q_norm", "k_norm"):  # per head: its weight's gradient sums over the tp ranks' heads
                plan[f"model.layers.{i}.self_attn.{name}"] = SequenceParallel(
                    sequence_dim=2, use_local_output=True
                )
    parallelize_module(model, tp_mesh, plan)


def samples(count: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (count, SEQ), generator=generator)
    return [{"input_ids": row, "labels": row} for row in ids]


def _loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    out = model(**batch)
    loss: torch.Tensor = out["loss"]
    return loss


def reference(kind: str, shards: int) -> tuple[dict[str, torch.Tensor], list[float]]:
    """One process: each micro-step is the mean of the data shards' losses."""
    model = make(kind)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    data = samples(STEPS * ACCUM * PER_RANK * shards)
    norms = []
    for step in range(STEPS):
        for micro in range(ACCUM):
            start = (step * ACCUM + micro) * PER_RANK * shards
            parts = []
            for shard in range(shards):
                chunk = data[start + shard * PER_RANK : start + (shard + 1) * PER_RANK]
                parts.append(_loss(model, {k: torch.stack([s[k] for s in chunk]) for k in chunk[0]}))
            (torch.stack(parts).mean() / ACCUM).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)))
        optimizer.step()
        optimizer.zero_grad()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, norms


def train(
    sizes: dict[str, int], kind: str = "own", save_to: str | None = None, model_to: str | None = None
) -> dict[str, Any]:
    """Trains STEPS steps of ACCUM micro-batches under ``sizes``; reports the whole state and the norms."""
    accelerator = Accelerator(
        cpu=True,
        parallelism_config=ParallelismConfig(**sizes),
        gradient_accumulation_steps=ACCUM,  # type: ignore[arg-type]
    )
    model = make(kind)
    if sizes.get("tp_size", 1) > 1:
        apply_tp(model, kind, accelerator.torch_device_mesh["tp"])
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    shards = accelerator.state.run.data_shards[0]
    loader = DataLoader(samples(STEPS * ACCUM * PER_RANK * shards), batch_size=PER_RANK)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    arrivals: list[int] = []  # rows each experts module's local pass gets
    local_pass = experts_module._run_local

    def counting(module: nn.Module, rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        arrivals.append(int(rows.shape[0]))
        return local_pass(module, rows, index)

    experts_module._run_local = counting  # type: ignore[assignment]
    norms = []
    try:
        for batch in loader:
            with accelerator.accumulate(model):
                accelerator.backward(_loss(model, batch))
                if accelerator.sync_gradients:
                    norms.append(float(accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)))
                optimizer.step()
                optimizer.zero_grad()
    finally:
        experts_module._run_local = local_pass  # type: ignore[assignment]
    if save_to is not None:
        accelerator.save_state(save_to)
    if model_to is not None:
        accelerator.save_model(model, model_to)
    local = [  # this rank's piece of each layer's stacked experts
        tuple(p.to_local().shape)
        for n, p in model.named_parameters()
        if n.endswith(("experts.up", "experts.gate_up_proj")) and hasattr(p, "to_local")
    ]
    sharded = [p.device_mesh.mesh_dim_names for n, p in model.named_parameters() if n.endswith("experts.up")]
    return {
        "state": accelerator.get_state_dict(model),
        "norms": norms,
        "local_experts": local,
        "received": arrivals,
        "expert_meshes": sharded,
        "expert_pieces": [
            p.to_local().detach().clone() for n, p in model.named_parameters() if "experts." in n
        ],
        "describe": accelerator.strategy.describe(),
    }


def resume(sizes: dict[str, int], folder: str, global_batch: int = 4, chunks: int = 1) -> dict[str, Any]:
    """Loads a state saved under another ep, then one step on a fixed global batch (its loss the mean of
    ``chunks`` pieces' losses: the load-balancing term is per batch, so one process mimics the shards)."""
    config = ParallelismConfig(**sizes) if sizes else None  # type: ignore[arg-type]
    accelerator = Accelerator(cpu=True, parallelism_config=config)
    model = make("own")
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    shards = accelerator.state.run.data_shards[0]
    loader = DataLoader(samples(global_batch), batch_size=global_batch // shards)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    def loss(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        pieces = [{k: v.chunk(chunks)[i] for k, v in batch.items()} for i in range(chunks)]
        return torch.stack([_loss(model, piece) for piece in pieces]).mean()

    return load_then_step(accelerator, model, optimizer, folder, loader, loss, MAX_NORM)


def refusals() -> dict[str, str]:
    """Each model ep cannot split, and its message (caught on every rank)."""
    messages: dict[str, str] = {}
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(ep_size=2))
    odd = TinyMoE()
    odd.layers[1].experts = StackedExperts(num_experts=3)
    for name, model in (("odd", odd), ("dense", nn.Sequential(nn.Linear(HIDDEN, HIDDEN)))):
        try:
            accelerator.prepare(model)
        except ValueError as error:
            messages[name] = str(error)
    return messages


def bf16_step() -> dict[str, Any]:
    """One bf16 step of a Qwen3-MoE under ep=2: the experts keep fp32 weights, compute in bf16."""
    accelerator = Accelerator(
        cpu=True, mixed_precision="bf16", parallelism_config=ParallelismConfig(ep_size=2)
    )
    model = make("qwen3_moe")
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(samples(4), batch_size=2))
    loss = _loss(model, next(iter(loader)))
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)
    optimizer.step()
    experts = model.model.layers[0].mlp.experts.gate_up_proj
    return {"loss": float(loss.detach()), "dtype": str(experts.dtype), "grad": str(experts.grad.dtype)}
