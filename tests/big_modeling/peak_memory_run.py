"""Run by test_dispatch in a fresh process: load a checkpoint with a small CPU budget, report peak RSS.

Prints one JSON line: the RSS high-water mark gained after start-up, the model and block sizes, the
device map and the largest difference from the reference logits saved by the parent.
"""

from __future__ import annotations

import json
import resource
import sys

import torch

from accelerate import init_empty_weights, load_checkpoint_and_dispatch
from accelerate.utils import compute_module_sizes
from tests.big_modeling.tiny_models import TiedLM


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize()


def main(folder: str, dim: int, layers: int, cpu_budget: int) -> None:
    ids = torch.load(f"{folder}/ids.pt")
    expected = torch.load(f"{folder}/logits.pt")
    with init_empty_weights():
        model = TiedLM(dim=dim, layers=layers, vocab=64)
    sizes = compute_module_sizes(model)
    with torch.no_grad():  # warm up kernels and allocator on a small model, outside the measurement
        TiedLM(dim=16, layers=1, vocab=64)(ids)
    start = _rss_bytes()
    if resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 > start + (1 << 20):
        # The high-water mark is from start-up; measure the gain from here on against a fresh mark.
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    model = load_checkpoint_and_dispatch(
        model,
        folder,
        device_map="auto",
        max_memory={"cpu": cpu_budget, "disk": "10GB"},
        no_split_module_classes=["Block"],
        offload_folder=f"{folder}/offload",
    )
    with torch.no_grad():
        logits = model(ids)
    with open("/proc/self/status") as handle:
        peak = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM"))
    print(
        json.dumps(
            {
                "peak_gain": peak - start,
                "model": sizes[""],
                "block": sizes["blocks.0"],
                "devices": sorted({str(v) for v in model.hf_device_map.values()}),
                "tied_together": model.hf_device_map.get("embed") == model.hf_device_map.get("head"),
                "max_diff": (logits - expected).abs().max().item(),
                "equal": bool(torch.equal(logits, expected)),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
