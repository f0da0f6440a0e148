"""Launched on 2 GPUs with cp_size=2: causal attention under ``maybe_context_parallel`` equals the
unsharded attention. Writes ``rank<N>.json`` into the folder given as its argument."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from accelerate import Accelerator

BATCH, HEADS, SEQ, HEAD_DIM = 2, 4, 64, 16  # SEQ divisible by 2 * cp_size (load balancing's chunks)


def main(out: Path) -> None:
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard

    accelerator = (
        Accelerator()
    )  # the parallelism config comes from the launcher (--parallelism_config_cp_size 2)
    config = accelerator.parallelism_config
    assert config is not None and config.cp_enabled, (
        "launch with --use_parallelism_config --parallelism_config_cp_size 2"
    )
    torch.manual_seed(0)  # the same q, k, v on every rank, as a data-parallel group's batch would be
    q, k, v = (torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, device=accelerator.device) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with accelerator.maybe_context_parallel(
        buffers=[q, k, v], buffer_seq_dims=[2, 2, 2], no_restore_buffers={q, k, v}
    ):
        local_len = q.shape[2]  # each rank now holds its part of the sequence
        out_local = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    (whole,) = context_parallel_unshard(accelerator.torch_device_mesh["cp"], [out_local], [2])
    row = {
        "rank": accelerator.process_index,
        "cp_rank": accelerator.context_parallel_rank,
        "local_len": int(local_len),
        "max_diff": float((whole - expected).abs().max()),
        "shape": list(whole.shape),
    }
    (out / f"rank{accelerator.process_index}.json").write_text(json.dumps(row))
    accelerator.end_training()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
