"""Rank functions for sequence parallelism (Ulysses) on a tiny transformers Llama, and the one-process
reference they are compared with (top-level: the pool sends them by name)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from accelerate import Accelerator
from accelerate.state.parallelism import ParallelismConfig
from accelerate.utils import ulysses_attention
from tests.backends.parallel.resume_step import load_then_step

SEQ, PER_RANK, STEPS, ACCUM, MAX_NORM, LR, MOMENTUM = 8, 2, 2, 2, 0.5, 0.5, 0.9


class OwnLM(nn.Module):
    """A causal LM of one's own: its attention calls the documented hook, its loss reads the sliced batch."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.position = nn.Embedding(32, 16), nn.Embedding(SEQ, 16)
        self.qkv, self.out, self.head = nn.Linear(16, 48, bias=False), nn.Linear(16, 16), nn.Linear(16, 32)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, position_ids: Any = None,
                shift_labels: Any = None, num_items_in_batch: Any = None) -> dict[str, torch.Tensor]:  # fmt: skip
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1]).expand_as(input_ids)
        x = self.embed(input_ids) + self.position(position_ids)
        b, s, _ = x.shape
        q, k, v = (t.view(b, s, 4, 4).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        attend = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        x = x + self.out(ulysses_attention(q, k, v, attend).transpose(1, 2).reshape(b, s, 16))
        logits = self.head(x)
        if shift_labels is None and labels is not None:
            shift_labels = F.pad(labels[:, 1:], (0, 1), value=-100)
        loss = F.cross_entropy(
            logits.flatten(0, 1), shift_labels.flatten(), ignore_index=-100, reduction="sum"
        )
        count = num_items_in_batch if num_items_in_batch is not None else (shift_labels != -100).sum()
        # A dict, not an object FSDP2 cannot look into: it finds the output tensors to hook its backward.
        return {"loss": loss / count, "logits": logits}


def make_llama(kv_heads: int = 2) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=kv_heads, max_position_embeddings=32, tie_word_embeddings=False,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config)


def samples(count: int, padded: bool = False) -> list[dict[str, torch.Tensor]]:
    """Token sequences whose labels ignore a few positions (so slices hold different target counts).

    ``padded``: sequences of different real lengths (8, 5, 3, 6, ...) padded on the right with token 0,
    ``attention_mask`` 0 and labels -100 there (a slice may hold only padding)."""
    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 32, (count, SEQ), generator=generator)
    labels = ids.clone()
    labels[:, :3] = -100  # a prompt that is not trained on: the first slice has fewer real targets
    if not padded:
        labels[::2, -2:] = -100
        return [{"input_ids": ids[i], "labels": labels[i]} for i in range(count)]
    mask = torch.ones_like(ids)
    for i in range(count):
        real = (SEQ, 5, 3, 6)[i % 4]
        ids[i, real:], labels[i, real:], mask[i, real:] = 0, -100, 0
    return [{"input_ids": ids[i], "labels": labels[i], "attention_mask": mask[i]} for i in range(count)]


def make_qwen3() -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=4, max_position_embeddings=32, tie_word_embeddings=False,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    return Qwen3ForCausalLM(config)


def _model(kind: str | int) -> Any:
    if kind == "own":
        return OwnLM()
    return make_qwen3() if kind == "qwen3" else make_llama(int(kind))


def saved_bytes(sizes: dict[str, int], length: int) -> int:
    """Bytes of activations one forward keeps for backward on this rank (distinct storages), for a
    batch of one ``length``-token sequence: what sequence parallelism divides."""
    config = ParallelismConfig(**sizes)  # type: ignore[arg-type]
    accelerator = Accelerator(cpu=True, parallelism_config=config)
    model = accelerator.prepare(make_llama())
    ids = torch.randint(0, 32, (1, length), generator=torch.Generator().manual_seed(0))
    loader = accelerator.prepare(DataLoader([{"input_ids": ids[0], "labels": ids[0]}], batch_size=1))
    params = {p.data_ptr() for p in model.parameters()}
    seen: dict[tuple[int, int], int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:  # activations only, not the (unsharded) weights
            seen[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(**next(iter(loader))).loss
    loss.backward()
    return sum(seen.values())


def reference(
    shards: int, kv_heads: str | int = 2, steps: int = STEPS, accum: int = ACCUM, padded: bool = False
) -> tuple[dict[str, torch.Tensor], list[float], list[float]]:
    """One process: each micro-step is the mean of the data shards' (whole-sequence) losses."""
    model = _model(kv_heads)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    data = samples(steps * accum * PER_RANK * shards, padded)
    losses, norms = [], []
    for step in range(steps):
        for micro in range(accum):
            start = (step * accum + micro) * PER_RANK * shards
            parts = []
            for shard in range(shards):
                chunk = data[start + shard * PER_RANK : start + (shard + 1) * PER_RANK]
                batch = {key: torch.stack([s[key] for s in chunk]) for key in chunk[0]}
                parts.append(model(**batch)["loss"])
            losses += [float(p.detach()) for p in parts]
            (torch.stack(parts).mean() / accum).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)))
        optimizer.step()
        optimizer.zero_grad()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, losses, norms


def train(
    sizes: dict[str, int], kv_heads: str | int = 2, save_to: str | None = None, padded: bool = False
) -> dict[str, Any]:
    """Trains STEPS steps of ACCUM micro-batches under ``sizes``; reports the state, losses and norms."""
    config = ParallelismConfig(**sizes)  # type: ignore[arg-type]
    accelerator = Accelerator(cpu=True, parallelism_config=config, gradient_accumulation_steps=ACCUM)
    model = _model(kv_heads)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    shards = accelerator.state.run.data_shards[0]
    loader = DataLoader(samples(STEPS * ACCUM * PER_RANK * shards, padded), batch_size=PER_RANK)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    losses, norms, widths = [], [], []
    for batch in loader:
        widths.append(tuple(batch["input_ids"].shape))
        with accelerator.accumulate(model):
            loss = model(**batch)["loss"]
            losses.append(float(loss.detach()))
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)))
            optimizer.step()
            optimizer.zero_grad()
    if save_to is not None:
        accelerator.save_state(save_to)
    return {
        "state": accelerator.get_state_dict(model),
        "losses": losses,
        "norms": norms,
        "widths": widths,
        "shard": accelerator.state.run.data_shards[1],
        "attn": getattr(getattr(model, "config", None), "_attn_implementation", None),
        "describe": accelerator.strategy.describe(),
    }


def resume(sizes: dict[str, int], folder: str, global_batch: int = 4) -> dict[str, Any]:
    """Loads a state saved under another topology, then one step on a fixed global batch."""
    config = ParallelismConfig(**sizes)  # type: ignore[arg-type]
    accelerator = Accelerator(cpu=True, parallelism_config=config)
    model = make_llama()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    shards = accelerator.state.run.data_shards[0]
    loader = DataLoader(samples(global_batch), batch_size=global_batch // shards)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    return load_then_step(accelerator, model, optimizer, folder, loader, lambda b: model(**b).loss, MAX_NORM)


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
    model = make_llama()
    model.model.layers[1].self_attn.is_causal = False  # an encoder's attention
    try:
        accelerator.prepare(model)
    except ValueError as error:
        messages["causal"] = str(error)
    model = make_llama()
    model.accepts_loss_kwargs = False  # its loss would be each slice's own mean
    try:
        accelerator.prepare(model)
    except ValueError as error:
        messages["loss_kwargs"] = str(error)
    loader = accelerator.prepare(DataLoader(samples(4)[:2], batch_size=2, collate_fn=_odd_length))
    try:
        next(iter(loader))
    except ValueError as error:
        messages["length"] = str(error)
    return messages


def _odd_length(chunk: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {key: torch.stack([s[key][:-1] for s in chunk]) for key in chunk[0]}


def trainer_under_sp() -> str:
    """transformers' Trainer with the native sp: the error it gets (its loss would be sp_size**2 too large)."""
    import tempfile

    from transformers import Trainer, TrainingArguments

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=PER_RANK,
            max_steps=1,
            report_to=[],
            use_cpu=True,
            parallelism_config=ParallelismConfig(sp_size=2),
        )
        trainer = Trainer(model=make_llama(), args=args, train_dataset=samples(8))
        try:
            trainer.train()
        except NotImplementedError as error:
            return str(error)
    return "trained"
