"""One rank of the sharded-checkpoint benchmark: ``save_state`` vs raw ``dcp.save``, 2 processes.

A model of 6 linear blocks (2048 wide: ~100 MB fp32) is sharded with ``fully_shard`` per block and
at the root; one AdamW step creates its state (2 x 100 MB). Raw side: ``dcp.save`` of
``{"model": get_model_state_dict}`` and of ``{"optimizer": get_optimizer_state_dict}`` into two
folders (DCP fsyncs every file). Accelerate side: ``save_state`` of the same model and optimizer
(the same two DCP folders, checksummed while written, plus random states, the manifest written
last and the atomic publish). The two alternate; each save starts and ends with a barrier, and
rank 0 writes the wall seconds to DIR/rank0.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

WIDTH, LAYERS = 2048, 6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--scratch", required=True, help="folder on the disk to measure")
    parser.add_argument("--out", required=True)
    parser.add_argument("--t0", type=float, default=0.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, WIDTH)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    # What prepare() of the FSDP engine registers; the engine itself lands separately.
    accelerator._models.append(model)
    prepared = accelerator.prepare_optimizer(optimizer)

    root = Path(tempfile.mkdtemp(prefix="fsdp-", dir=args.scratch)) if rank == 0 else None
    shared: list[object] = [str(root)]
    dist.broadcast_object_list(shared)
    root = Path(str(shared[0]))
    counter = iter(range(10**6))

    def timed(save: object) -> float:
        target = root / f"c{next(counter)}"
        dist.barrier()
        start = time.perf_counter()
        save(target)  # type: ignore[operator]
        dist.barrier()
        wall = time.perf_counter() - start
        if rank == 0:
            shutil.rmtree(target)  # keep one checkpoint on disk at a time
        dist.barrier()
        return wall

    def raw(target: Path) -> None:
        dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=target / "pytorch_model_fsdp_0")
        state = get_optimizer_state_dict(model, optimizer)
        dcp.save({"optimizer": state}, checkpoint_id=target / "optimizer_0")

    def accel(target: Path) -> None:
        accelerator.save_state(str(target))

    assert prepared is not None
    timed(raw), timed(accel)  # warm-up: page cache, DCP's first-call set-up
    result: dict[str, list[float]] = {"raw": [], "accel": []}
    for i in range(args.repeats):
        order = (("raw", raw), ("accel", accel)) if i % 2 == 0 else (("accel", accel), ("raw", raw))
        for name, save in order:
            result[name].append(timed(save))
    if rank == 0:
        nbytes = sum(p.numel() * p.element_size() for p in model.parameters()) * 3  # weights + 2 moments
        Path(args.out, "rank0.json").write_text(json.dumps({"save": result, "bytes": nbytes}))
        shutil.rmtree(root, ignore_errors=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
