"""One process of the fp8 (torchao) step benchmark: a hand-converted torchao loop and the
Accelerator loop (``mixed_precision="fp8"``), alternated every optimizer step.

Usage: python fp8_worker.py --out DIR [--block N --repeats R]
Writes DIR/rank0.json: CPU seconds per optimizer step of each repeat, raw and accelerate, aligned.
Both train their own copy of the same MLP (512-512-512-10, batch 64, AdamW) with one torch thread:
the middle linear is converted to torchao's Float8Linear (first and last stay, upstream's default
filter), and the forward runs under bf16 autocast in both, so the only difference is the code
around the step.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from common import adamw_prepared  # same folder (the script's own, on sys.path)
from step_worker import measure_both_orders, one_process_args  # the alternating CPU-time measurement

BATCH, WIDTH, CLASSES, NUM_BATCHES = 64, 512, 10, 8


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, CLASSES),
    )  # fmt: skip


def make_batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [
        (torch.randn(BATCH, WIDTH, generator=gen), torch.randint(0, CLASSES, (BATCH,), generator=gen))
        for _ in range(NUM_BATCHES)
    ]


def raw_loop() -> Callable[[int], None]:
    from torchao.float8 import convert_to_float8_training

    model = convert_to_float8_training(make_model(), module_filter_fn=lambda module, fqn: fqn == "2")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = make_batches()

    def run(steps: int) -> None:
        for i in range(steps):
            x, y = batches[i % NUM_BATCHES]
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
            loss = F.cross_entropy(out.float(), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

    return run


def accelerate_loop() -> Callable[[int], None]:
    from accelerate import Accelerator
    from accelerate.utils import AORecipeKwargs

    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs()])
    model, optimizer = adamw_prepared(accelerator, make_model())
    batches = make_batches()

    def run(steps: int) -> None:
        for i in range(steps):
            x, y = batches[i % NUM_BATCHES]
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()

    return run


def main() -> None:
    args = one_process_args(argparse.ArgumentParser())
    measure_both_orders(raw_loop, accelerate_loop, 1, args.repeats, args.block, args.out)


if __name__ == "__main__":
    main()
