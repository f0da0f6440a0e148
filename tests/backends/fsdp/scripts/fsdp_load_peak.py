"""Launched by tests/backends/fsdp/test_fsdp_launch.py: how much host memory each rank gains while it builds a
384 MB model and prepare() shards it under FSDP, with cpu_ram_efficient_loading as argv[2] says (the
other ranks then build it on the meta device). Writes rank<N>.json into the folder argv[1]."""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import psutil
from torch import nn

from accelerate import Accelerator, init_empty_weights
from accelerate.utils import FullyShardedDataParallelPlugin

MODEL_MB = 96 * 1024 * 1024 * 4 / 2**20  # 96 square layers of 1024 float32 weights (biases aside)


def build() -> nn.Module:
    return nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(96)])


def main() -> None:
    efficient = sys.argv[2] == "true"
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        cpu_ram_efficient_loading=efficient,
        auto_wrap_policy="size_based_wrap",
        min_num_params=10**6,
    )
    accelerator = Accelerator(fsdp_plugin=plugin)
    start = psutil.Process().memory_info().rss / 2**20
    if efficient and not accelerator.is_main_process:
        with init_empty_weights():
            model = build()
    else:
        model = build()
    accelerator.prepare(model)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    row = {"gained_mb": peak - start, "model_mb": MODEL_MB}
    Path(sys.argv[1], f"rank{accelerator.process_index}.json").write_text(json.dumps(row))


if __name__ == "__main__":
    main()
