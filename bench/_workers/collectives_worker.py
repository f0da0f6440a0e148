"""One rank of the collectives benchmark (launched by torchrun with 2 processes, gloo).

Usage: torchrun --nproc_per_node 2 collectives_worker.py --out DIR
For each operation and size, the raw ``torch.distributed`` call and the accelerate call alternate
op by op (both ranks in the same order); DIR/rank{N}.json holds CPU and wall seconds per op.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from common import cpu_accelerator  # same folder (the script's own, on sys.path)

SIZES_MB = (1, 64)


def ops(
    accelerator: object, world: int
) -> dict[str, tuple[Callable[[torch.Tensor], object], Callable[[torch.Tensor], object]]]:
    """name -> (raw call, accelerate call) on the same tensor."""

    def raw_gather(t: torch.Tensor) -> torch.Tensor:
        out = torch.empty((world * t.shape[0], *t.shape[1:]), dtype=t.dtype)
        dist.all_gather_into_tensor(out, t)
        return out

    def raw_reduce(t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t)
        return t

    def raw_copy_reduce(t: torch.Tensor) -> torch.Tensor:
        out = t.clone()
        dist.all_reduce(out)
        return out

    return {
        "gather": (raw_gather, accelerator.gather),  # type: ignore[attr-defined]
        "gather_for_metrics": (raw_gather, accelerator.gather_for_metrics),  # type: ignore[attr-defined]
        "reduce": (raw_reduce, lambda t: accelerator.reduce(t, reduction="sum")),  # type: ignore[attr-defined]
        # The same work as accelerate's reduce, which leaves the caller's tensor untouched.
        "reduce (copying)": (raw_copy_reduce, lambda t: accelerator.reduce(t, reduction="sum")),  # type: ignore[attr-defined]
    }


def main() -> None:
    args, accelerator = cpu_accelerator(repeats=6)
    world, rank = accelerator.num_processes, accelerator.process_index
    results: dict[str, dict[str, list[float]]] = {}
    for size_mb in SIZES_MB:
        tensor = torch.randn(size_mb * 1024 * 1024 // 4)
        per_repeat = max(2, 16 // size_mb)
        for name, (raw, accel) in ops(accelerator, world).items():
            for fn in (raw, accel, raw, accel):  # warm-up
                fn(tensor)
            cpu = {"raw": [], "accel": []}
            wall = {"raw": [], "accel": []}
            for _ in range(args.repeats):
                sums = {"raw": [0.0, 0.0], "accel": [0.0, 0.0]}
                for j in range(per_repeat):
                    order = (
                        (("raw", raw), ("accel", accel)) if j % 2 == 0 else (("accel", accel), ("raw", raw))
                    )
                    for side, fn in order:
                        c0, w0 = time.process_time(), time.perf_counter()
                        fn(tensor)
                        sums[side][0] += time.process_time() - c0
                        sums[side][1] += time.perf_counter() - w0
                for side in ("raw", "accel"):
                    cpu[side].append(sums[side][0] / per_repeat)
                    wall[side].append(sums[side][1] / per_repeat)
            results[f"{name} {size_mb} MB"] = {
                "raw_cpu": cpu["raw"],
                "accel_cpu": cpu["accel"],
                "raw_wall": wall["raw"],
                "accel_wall": wall["accel"],
            }
    dist.barrier()
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(results))
    accelerator.end_training()


if __name__ == "__main__":
    main()
