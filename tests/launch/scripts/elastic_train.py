"""Launched by the elastic tests: one epoch, resumable at any world size, recording every sample it trains on.

    accelerate launch --nnodes 1:2 ... elastic_train.py PROJECT IDS_DIR OUT [--block_at K] [--victims b,c]
        [--wait_at J] [--wait_world V] [--stop_at S] [--start_world W] [--length N]

Every start (the first, and every re-formation of the group) resumes with
``load_state(missing_ok=True)`` from the newest committed checkpoint; a checkpoint is saved every
``SAVE_EVERY`` optimizer steps. Each process writes the sample ids of each step it trains to its own
file in IDS_DIR (first line: the step it resumed from), so the test can rebuild the epoch.

Hooks the test uses to make events happen at a known step (no timing involved):
- ``--block_at K``: on the "nodes" whose ELASTIC_NODE is in ``--victims`` (default ``b``), after
  step K, write IDS_DIR/blocked-NODE and wait to be killed (the peers then block in the next step's
  all-reduce).
- ``--wait_at J``: at world size ``--wait_world`` (default 1), once at step J or later (after step
  J's checkpoint, or on resuming from it), write IDS_DIR/waiting-NODE and wait for the agent to
  re-form the group (a node joining) — it stops this process.
- ``--stop_at S``: save at step S and exit (the reference run's deterministic world-size change).
- ``--start_world W``: a fresh start (no checkpoint) on fewer than W processes waits for the others
  (the agent re-forms the group when they arrive), so the first phase always has W processes.
- ``--length N``: samples in the epoch (default 48), batch 2 per process.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, ProjectConfiguration, set_seed

SAVE_EVERY = 2
LENGTH, BATCH = 48, 2


class Indexed(Dataset):  # type: ignore[type-arg]
    def __init__(self, length: int = LENGTH) -> None:
        gen = torch.Generator().manual_seed(1)
        self.x = torch.randn(length, 6, generator=gen)
        self.y = torch.randn(length, 2, generator=gen)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.x[i], self.y[i], i


class Progress:
    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = state["step"]


def _wait_to_be_stopped(marker: str) -> None:
    with open(marker, "w") as file:
        file.write(f"{os.getpid()}\n")
    time.sleep(120)
    raise SystemExit(f"nobody stopped this process after {marker} (the test should have)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("project_dir")
    parser.add_argument("ids_dir")
    parser.add_argument("out")
    parser.add_argument("--block_at", type=int, default=0)
    parser.add_argument("--victims", default="b")
    parser.add_argument("--wait_at", type=int, default=0)
    parser.add_argument("--wait_world", type=int, default=1)
    parser.add_argument("--stop_at", type=int, default=0)
    parser.add_argument("--start_world", type=int, default=1)
    parser.add_argument("--length", type=int, default=LENGTH)
    args = parser.parse_args(argv)
    node = os.environ.get("ELASTIC_NODE", "")
    waiting = os.path.join(args.ids_dir, f"waiting-{node}")

    accelerator = Accelerator(
        project_config=ProjectConfiguration(project_dir=args.project_dir, automatic_checkpoint_naming=True),
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),
    )
    set_seed(0)
    loader = DataLoader(Indexed(args.length), batch_size=BATCH, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    resumed = accelerator.load_state(missing_ok=True)
    world = accelerator.num_processes
    if resumed is None and world < args.start_world:
        _wait_to_be_stopped(os.path.join(args.ids_dir, f"early-{os.getpid()}"))
    # A group of the waiting size that resumed at or after the waiting step (it re-formed without a
    # node that was slow to rejoin) waits too: it must not train steps the larger group will own.
    if args.wait_at and world == args.wait_world and progress.step >= args.wait_at:
        _wait_to_be_stopped(waiting)
    record = os.path.join(args.ids_dir, f"{time.time_ns()}-{os.getpid()}.txt")
    with open(record, "w") as ids:
        ids.write(f"resumed {progress.step} world {world}\n")
        for x, y, index in loader:
            loss = F.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            progress.step += 1
            ids.write("".join(f"{progress.step} {i}\n" for i in index.tolist()))
            ids.flush()
            if progress.step % SAVE_EVERY == 0:
                accelerator.save_state()
            if progress.step == args.stop_at:
                accelerator.end_training()
                return
            if progress.step == args.block_at and node in args.victims.split(","):
                _wait_to_be_stopped(os.path.join(args.ids_dir, f"blocked-{node}"))
            if progress.step == args.wait_at and world == args.wait_world:
                _wait_to_be_stopped(waiting)
    if accelerator.is_main_process:
        torch.save(accelerator.unwrap_model(model).state_dict(), args.out)
    print(f"rank {accelerator.process_index} of {world} finished at step {progress.step}", flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
