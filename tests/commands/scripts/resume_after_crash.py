"""Launched by tests: the restart-and-resume pattern, with rank 1 dying mid-run.

    accelerate launch --cpu --num_processes 2 --max_restarts 1 resume_after_crash.py PROJECT OUT [--die once|always]

One script serves the first start and every restart: ``load_state(missing_ok=True)`` with
automatic checkpoint naming resumes from the newest committed checkpoint (or starts fresh), the
registered ``Progress`` says how many steps are done, and the interrupted epoch skips the batches
it already trained on. A checkpoint is saved every ``SAVE_EVERY`` steps. With ``--die``, rank 1
ends itself with ``os._exit`` between a forward and its backward at step ``DIE_AT`` — once (a
marker file beside OUT remembers it) or on every attempt. Rank 0 saves the final parameters to OUT.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, ProjectConfiguration, set_seed

SAVE_EVERY = 3
DIE_AT = 8  # two steps after the checkpoint of step 6: both are lost and trained again
EPOCHS = 2


class Progress:
    """The loop's position, saved with every checkpoint."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = state["step"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("project_dir")
    parser.add_argument("out")
    parser.add_argument("--die", choices=["never", "once", "always"], default="never")
    parser.add_argument(
        "--stateless_loader",
        action="store_true",
        help="upstream's default loader: load_state restores the epoch and shuffle, the skip does the rest",
    )
    args = parser.parse_args()

    accelerator = Accelerator(
        project_config=ProjectConfiguration(
            project_dir=args.project_dir, automatic_checkpoint_naming=True, total_limit=2
        ),
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=not args.stateless_loader),
    )
    set_seed(0)
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(84, 6, generator=gen)
    targets = torch.randn(84, 2, generator=gen)
    loader = DataLoader(TensorDataset(features, targets), batch_size=6, shuffle=True)  # 7 steps per epoch
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(32, 2)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.8)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)

    resumed = accelerator.load_state(missing_ok=True)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    print(
        f"rank {accelerator.process_index} attempt {attempt} resumed from {resumed} at step {progress.step}"
    )
    start_epoch, skip = divmod(progress.step, len(loader))
    marker = args.out + ".died"
    for epoch in range(start_epoch, EPOCHS):
        model.train()
        batches = accelerator.skip_first_batches(loader, skip) if epoch == start_epoch and skip else loader
        for x, y in batches:
            loss = F.mse_loss(model(x), y)
            if progress.step + 1 == DIE_AT and accelerator.process_index == 1 and _dies(args.die, marker):
                os._exit(13)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            progress.step += 1
            if progress.step % SAVE_EVERY == 0:
                accelerator.save_state()
    if accelerator.is_main_process:
        torch.save(accelerator.unwrap_model(model).state_dict(), args.out)
    print(f"rank {accelerator.process_index} finished at step {progress.step}")
    accelerator.end_training()


def _dies(mode: str, marker: str) -> bool:
    if mode == "always":
        return True
    if mode == "once" and not os.path.exists(marker):
        with open(marker, "w") as file:
            file.write("rank 1 died here once\n")
        return True
    return False


if __name__ == "__main__":
    main()
