"""One rank of the data-loading benchmark (plain ``python`` for 1 process, torchrun for 2).

Raw side: ``DataLoader(dataset, batch_size=64, sampler=DistributedSampler(...))`` (``shuffle=True``
alone in one process); accelerate side: ``accelerator.prepare(DataLoader(dataset, batch_size=64,
shuffle=True))``. Epochs of the two alternate; each rank writes DIR/rank{N}.json with the CPU
seconds of each epoch and the samples it read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
from common import cpu_accelerator  # same folder (the script's own, on sys.path)
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

SAMPLES, FEATURES, BATCH = 8192, 256, 64


def epoch_runner(loader: DataLoader, set_epoch: Callable[[int], None]) -> Callable[[int], tuple[float, int]]:
    def run(epoch: int) -> tuple[float, int]:
        set_epoch(epoch)
        seen = 0
        start = time.process_time()
        for x, _ in loader:
            seen += x.shape[0]
        return time.process_time() - start, seen

    return run


def main() -> None:
    args, accelerator = cpu_accelerator(repeats=10)
    world, rank = accelerator.num_processes, accelerator.process_index
    gen = torch.Generator().manual_seed(0)
    dataset = TensorDataset(
        torch.randn(SAMPLES, FEATURES, generator=gen), torch.randint(0, 10, (SAMPLES,), generator=gen)
    )

    if world > 1:
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
        raw = epoch_runner(DataLoader(dataset, batch_size=BATCH, sampler=sampler), sampler.set_epoch)
    else:
        raw = epoch_runner(DataLoader(dataset, batch_size=BATCH, shuffle=True), lambda epoch: None)
    prepared = accelerator.prepare(DataLoader(dataset, batch_size=BATCH, shuffle=True))
    accel = epoch_runner(prepared, prepared.set_epoch)

    raw(0)
    accel(0)
    out: dict[str, list[float]] = {"raw": [], "accel": []}
    for i in range(args.repeats):
        order = (("raw", raw), ("accel", accel)) if i % 2 == 0 else (("accel", accel), ("raw", raw))
        for side, run in order:
            seconds, seen = run(i + 1)
            out[side].append(seen / seconds)  # samples per CPU second on this rank
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(out))
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
