"""Pipeline-parallel inference on two GPUs over NCCL, launched with `accelerate launch --num_processes 2`.

Each process keeps one stage on its own GPU; the output (gathered to every process) must match the
plain forward computed on the CPU. Every rank writes rank<N>.json into argv[1]. Self-contained.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch import nn

from accelerate import PartialState
from accelerate.inference import prepare_pippy


def main() -> None:
    state = PartialState()
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(6)]).eval()
    batch = torch.randn(8, 32)
    with torch.no_grad():
        expected = model(batch)
    # The example is one micro-batch (as upstream): 4 of 2 rows make the batch of 8.
    model = prepare_pippy(model, example_args=(batch[:2],), num_chunks=4, gather_output=True)
    with torch.no_grad():
        output = model(batch)
    row = {
        "rank": state.process_index,
        "backend": state.backend,
        "device": str(output.device),
        "split_points": model.hf_split_points,
        "max_diff": float((output.cpu() - expected).abs().max()),
    }
    (Path(sys.argv[1]) / f"rank{state.process_index}.json").write_text(json.dumps(row))


if __name__ == "__main__":
    main()
