"""Rank functions for sequence parallelism (Ulysses) on a tiny transformers Llama, and the one-process
reference they are compared with (top-level: the pool sends them by name)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from accelerate import Accelerator
from accelerate.state.parallelism import ParallelismConfig

SEQ, PER_RANK, STEPS, ACCUM, MAX_NORM, LR = 8, 2, 2, 2, 0.5, 0.5


def make_llama(kv_heads: int = 2) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=kv_heads, max_position_embeddings=32, tie_word_embeddings=False,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config)


def samples(count: int) -> list[dict[str, torch.Tensor]]:
    """Token sequences whose labels ignore a few positions (so slices hold different target counts)."""
    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 32, (count, SEQ), generator=generator)
    labels = ids.clone()
    labels[:, :3] = -100  # a prompt that is not trained on: the first slice has fewer real targets
    labels[::2, -2:] = -100
    return [{"input_ids": ids[i], "labels": labels[i]} for i in range(count)]


def reference(
    shards: int, kv_heads: int = 2, steps: int = STEPS, accum: int = ACCUM
) -> tuple[dict[str, torch.Tensor], list[float], list[float]]:
    """One process: each micro-step is the mean of the data shards' (whole-sequence) losses."""
    model = make_llama(kv_heads)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    data = samples(steps * accum * PER_RANK * shards)
    losses, norms = [], []
    for step in range(steps):
        for micro in range(accum):
            start = (step * accum + micro) * PER_RANK * shards
            parts = []
            for shard in range(shards):
                chunk = data[start + shard * PER_RANK : start + (shard + 1) * PER_RANK]
                batch = {key: torch.stack([s[key] for s in chunk]) for key in chunk[0]}
                parts.append(model(**batch).loss)
            losses += [float(p.detach()) for p in parts]
            (torch.stack(parts).mean() / accum).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)))
        optimizer.step()
        optimizer.zero_grad()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, losses, norms


def train(sizes: dict[str, int], kv_heads: int = 2) -> dict[str, Any]:
    """Trains STEPS steps of ACCUM micro-batches under ``sizes``; reports the state, losses and norms."""
    config = ParallelismConfig(**sizes)  # type: ignore[arg-type]
    accelerator = Accelerator(cpu=True, parallelism_config=config, gradient_accumulation_steps=ACCUM)
    model = make_llama(kv_heads)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    shards = accelerator.state.run.data_shards[0]
    loader = DataLoader(samples(STEPS * ACCUM * PER_RANK * shards), batch_size=PER_RANK)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses, norms, widths = [], [], []
    for batch in loader:
        widths.append(tuple(batch["input_ids"].shape))
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            losses.append(float(loss.detach()))
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)))
            optimizer.step()
            optimizer.zero_grad()
    return {
        "state": accelerator.get_state_dict(model),
        "losses": losses,
        "norms": norms,
        "widths": widths,
        "shard": accelerator.state.run.data_shards[1],
        "attn": model.config._attn_implementation,
        "describe": accelerator.strategy.describe(),
    }


def refusals() -> dict[str, str]:
    """Each bad input's message, caught on every rank."""
    messages: dict[str, str] = {}
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(sp_size=2))
    model = make_llama()
    model.config.num_attention_heads = 3  # what the check reads (the layers are built already)
    try:
        accelerator.prepare(model)
    except ValueError as error:
        messages["heads"] = str(error)
    loader = accelerator.prepare(DataLoader(samples(4)[:2], batch_size=2, collate_fn=_odd_length))
    try:
        next(iter(loader))
    except ValueError as error:
        messages["length"] = str(error)
    return messages


def _odd_length(chunk: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {key: torch.stack([s[key][:-1] for s in chunk]) for key in chunk[0]}
