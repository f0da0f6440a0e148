"""Save the whole training state every N steps, and resume from any saved checkpoint.

`save_state` writes model, optimizer, scheduler, dataloader-sampler and RNG states; `load_state`
puts them back. On resume we skip the batches of the interrupted epoch already trained on, so a
resumed run ends with the same weights as an uninterrupted one.

    accelerate launch --cpu --num_processes 2 examples/checkpointing.py --output_dir ckpts
    accelerate launch --cpu --num_processes 2 examples/checkpointing.py --output_dir ckpts \
        --resume_from_checkpoint ckpts/step_4
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import set_seed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output_dir", required=True, help="where step_<N> checkpoint folders go")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--checkpointing_steps", type=int, default=4, help="save every this many steps")
    parser.add_argument("--resume_from_checkpoint", default=None, help="a step_<N> folder to resume from")
    args = parser.parse_args()

    accelerator = Accelerator()
    set_seed(0)
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(256, 8, generator=gen)
    targets = features @ torch.randn(8, 1, generator=gen) + 0.1 * torch.randn(256, 1, generator=gen)
    loader = DataLoader(TensorDataset(features, targets), batch_size=args.batch_size, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.7)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    completed_steps = 0
    if args.resume_from_checkpoint is not None:
        path = args.resume_from_checkpoint.rstrip("/")
        name = os.path.basename(path)
        if not name.startswith("step_"):
            raise ValueError(
                f"--resume_from_checkpoint={path!r}: expected a step_<N> folder written by this script"
            )
        accelerator.load_state(path)
        completed_steps = int(name.removeprefix("step_"))
        accelerator.print(f"resumed from {path} at step {completed_steps}")
    start_epoch, skip = divmod(completed_steps, len(loader))

    for epoch in range(start_epoch, args.epochs):
        model.train()
        # Only the epoch we stopped in starts part-way; later epochs see their whole shuffle.
        batches = accelerator.skip_first_batches(loader, skip) if epoch == start_epoch and skip else loader
        for x, y in batches:
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            completed_steps += 1
            if completed_steps % args.checkpointing_steps == 0:
                accelerator.save_state(os.path.join(args.output_dir, f"step_{completed_steps}"))
        accelerator.print(f"epoch {epoch} done at step {completed_steps}, loss {loss.item():.4f}")

    weights = accelerator.unwrap_model(model)
    checksum = sum(float(p.detach().double().sum()) for p in weights.parameters())
    accelerator.print(f"final step {completed_steps} weight checksum {checksum:.10f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
