"""Profile a few training steps with ``accelerator.profile`` and ``ProfileKwargs``.

``ProfileKwargs`` holds ``torch.profiler`` settings (what to record, shapes, memory, ...) and,
with ``output_trace_dir``, each process writes a Chrome trace ``profile_<rank>.json`` there when
the block ends (open it in chrome://tracing or Perfetto). The profiler object the block yields
gives the usual summary tables.

    accelerate launch --cpu --num_processes 2 examples/profiler.py --trace_dir traces
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import ProfileKwargs, set_seed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace_dir", required=True, help="where each process writes profile_<rank>.json")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()

    profile_kwargs = ProfileKwargs(
        activities=["cpu"], record_shapes=True, profile_memory=True, output_trace_dir=args.trace_dir
    )
    # Given to the Accelerator, the settings are the default for every accelerator.profile() block.
    accelerator = Accelerator(kwargs_handlers=[profile_kwargs])
    set_seed(0)
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(256, 32, generator=gen)
    targets = torch.randint(0, 4, (256,), generator=gen)
    loader = DataLoader(TensorDataset(features, targets), batch_size=16)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    with accelerator.profile() as prof:
        for step, (x, y) in enumerate(loader):
            if step == args.steps:
                break
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()

    if accelerator.is_main_process:
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=8))
    accelerator.wait_for_everyone()  # every trace file is written once all processes get here
    accelerator.print(f"profiled {args.steps} steps; traces in {args.trace_dir}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
