"""One rank of the sequence-parallel benchmark (started by torchrun on 2 processes, sp=2).

A causal LM of our own (2 blocks, width 256, 8 heads; sequence 1024, batch 2; AdamW; global-norm
clipping; gloo, one thread per process) trained two ways in the same processes, alternating optimizer
step by optimizer step: a hand-written Ulysses loop (each rank slices the batch itself, shifts the
labels before slicing, exchanges q/k/v and the attention output with
``torch.distributed.nn.functional.all_to_all_single``, ``fully_shard`` over the two ranks, loss scaled
so FSDP's average is the sequence's sum) and the same model through
``Accelerator(parallelism_config=ParallelismConfig(sp_size=2))`` with a prepared loader and
``accelerate.utils.ulysses_attention``. Writes DIR/rank{N}.json with CPU seconds per optimizer step.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # torchrun runs this file as a script

from bench._workers.common import Step, accelerate_step, race  # noqa: E402

WIDTH, HEADS, SEQ, BATCH, DEPTH, VOCAB = 256, 8, 1024, 2, 2, 512
NUM_BATCHES, MAX_NORM, IGNORE = 4, 1.0, -100
HEAD_DIM = WIDTH // HEADS
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Block(nn.Module):
    def __init__(self, attend: Attend) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH, bias=False), nn.Linear(WIDTH, WIDTH)
        self.fc1, self.fc2 = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)
        self.attend = attend

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = (
            t.view(b, s, HEADS, HEAD_DIM).transpose(1, 2) for t in self.qkv(self.norm1(x)).chunk(3, -1)
        )
        x = x + self.out(self.attend(q, k, v).transpose(1, 2).reshape(b, s, WIDTH))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class LM(nn.Module):
    """Loss inside forward: the slice's summed cross entropy over the whole sequence's target count."""

    def __init__(self, attend: Attend) -> None:
        super().__init__()
        self.embed, self.position = nn.Embedding(VOCAB, WIDTH), nn.Embedding(SEQ, WIDTH)
        self.blocks = nn.ModuleList([Block(attend) for _ in range(DEPTH)])
        self.norm, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB)

    def forward(
        self, input_ids: torch.Tensor, labels: Any = None, position_ids: Any = None,
        shift_labels: Any = None, num_items_in_batch: Any = None,
    ) -> dict[str, torch.Tensor]:  # fmt: skip
        x = self.embed(input_ids) + self.position(position_ids)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        loss = F.cross_entropy(
            logits.flatten(0, 1), shift_labels.flatten(), ignore_index=IGNORE, reduction="sum"
        )
        return {"loss": loss / num_items_in_batch}


def hand_ulysses(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """All-to-all to (whole sequence, my heads), causal attention, all-to-all back."""
    from torch.distributed.nn.functional import all_to_all_single

    n = dist.get_world_size()

    def to_heads(t: torch.Tensor) -> torch.Tensor:
        b, h, s, d = t.shape
        send = t.reshape(b, n, h // n, s, d).transpose(0, 1).contiguous()
        got = all_to_all_single(torch.empty_like(send), send)
        return got.permute(1, 2, 0, 3, 4).reshape(b, h // n, n * s, d)

    out = causal(to_heads(q), to_heads(k), to_heads(v))
    b, h, s, d = out.shape
    send = out.reshape(b, h, n, s // n, d).permute(2, 0, 1, 3, 4).contiguous()
    got = all_to_all_single(torch.empty_like(send), send)
    return got.transpose(0, 1).reshape(b, n * h, s // n, d)


def dataset() -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (NUM_BATCHES * BATCH, SEQ), generator=gen)
    return [{"input_ids": row, "labels": row} for row in ids]


def cycle(loader: Any) -> Iterator[Any]:
    while True:
        yield from loader


def raw_loop() -> Step:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    n, rank = dist.get_world_size(), dist.get_rank()
    mesh = init_device_mesh("cpu", (n,), mesh_dim_names=("sp",))
    torch.manual_seed(0)
    model = LM(hand_ulysses)
    fully_shard(model, mesh=mesh, reshard_after_forward=None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches, width = cycle(DataLoader(dataset(), batch_size=BATCH)), SEQ // n
    part = slice(rank * width, (rank + 1) * width)

    def run() -> None:
        batch = next(batches)
        ids, labels = batch["input_ids"], batch["labels"]
        shifted = torch.cat([labels[:, 1:], labels.new_full((labels.shape[0], 1), IGNORE)], dim=1)
        count = (shifted != IGNORE).sum()
        positions = torch.arange(SEQ).expand_as(ids)[:, part]
        out = model(
            ids[:, part], position_ids=positions, shift_labels=shifted[:, part], num_items_in_batch=count
        )
        (out["loss"] * n).backward()  # FSDP averages over the sp ranks; the slices' gradients add up
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
        optimizer.zero_grad()

    return run


def accelerate_loop() -> Step:
    from accelerate import Accelerator
    from accelerate.utils import ParallelismConfig, ulysses_attention

    accelerator = Accelerator(parallelism_config=ParallelismConfig(sp_size=dist.get_world_size()))
    torch.manual_seed(0)
    model = LM(lambda q, k, v: ulysses_attention(q, k, v, causal))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(dataset(), batch_size=BATCH)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    batches = cycle(loader)

    def run() -> None:
        batch = next(batches)
        accelerate_step(accelerator, model, optimizer, lambda: model(**batch)["loss"], MAX_NORM)

    return run


if __name__ == "__main__":
    race(lambda _: raw_loop(), lambda _: accelerate_loop())
