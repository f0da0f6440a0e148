"""The big-model benchmark's process: a 64 MB stack of MLP blocks, raw PyTorch vs big-model paths.

Pairs (alternating, one torch thread; DIR/rank0.json holds seconds per repeat):
- ``hooks``: forward of the model dispatched with hooks (``force_hooks``, all on the CPU) vs the
  same model without hooks (CPU time): the per-forward cost of the hooks.
- ``load``: ``load_checkpoint_and_dispatch`` into an empty model vs a model built on the meta device
  filled by ``safetensors`` ``load_file`` + ``load_state_dict(assign=True)``, each followed by one
  forward (both map the file and read it only when used): time to the first output (wall).
- ``rss``: the same two loads (+ forward), each side in fresh processes (``--rss raw|accel``),
  alternating; each process loads once unmeasured (imports, first-call caches), then measures one
  load: the process's peak RSS (VmHWM, reset before the load) and its rise over the RSS before it.
- ``disk``: forward of a model whose every block is offloaded to disk, read from the checkpoint's
  safetensors file (``load_checkpoint_and_dispatch`` with ``device_map`` "disk"), vs a hand-written
  loop that reads each block's weights from the same file with ``safe_open`` and runs the block
  (CPU time): the cost of the offload hooks over doing the same reads by hand.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

WIDTH, BLOCKS, BATCH = 512, 8, 64


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(WIDTH, 4 * WIDTH)
        self.down = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


def build() -> nn.Module:
    return nn.Sequential(*[Block() for _ in range(BLOCKS)]).eval()


def timed(fn: Callable[[], object], clock: Callable[[], float]) -> float:
    start = clock()
    fn()
    return clock() - start


def pairs(raw: Callable[[], float], accel: Callable[[], float], repeats: int) -> dict[str, list[float]]:
    raw()
    accel()
    out: dict[str, list[float]] = {"raw": [], "accel": []}
    for i in range(repeats):
        order = [("raw", raw), ("accel", accel)] if i % 2 == 0 else [("accel", accel), ("raw", raw)]
        for name, fn in order:
            out[name].append(fn())
    return out


RSS_REPEATS = 4  # fresh processes per side


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def rss_once(side: str, folder: Path) -> None:
    """One load (+ forward) after a warm-up one; prints the peak RSS and the RSS before loading (KiB)."""
    from accelerate import init_empty_weights, load_checkpoint_and_dispatch

    x = torch.randn(BATCH, WIDTH)

    def load() -> None:
        with torch.no_grad():
            if side == "raw":
                with torch.device("meta"):
                    model = build()
                model.load_state_dict(load_file(str(folder / "model.safetensors")), assign=True)
            else:
                with init_empty_weights():
                    model = build()
                model = load_checkpoint_and_dispatch(model, folder, device_map={"": "cpu"})
            model(x)

    load()  # once unmeasured, the same side: its imports, first-call caches and allocator arenas
    gc.collect()
    before = _status_kb("VmRSS") or 0
    try:  # reset the high-water mark (Linux), so imports and set-up do not count
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    load()
    peak = _status_kb("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_kb": peak, "before_kb": before}))


def rss_pairs(folder: Path) -> dict[str, list[dict[str, int]]]:
    out: dict[str, list[dict[str, int]]] = {"raw": [], "accel": []}
    for i in range(RSS_REPEATS):
        for side in ("raw", "accel") if i % 2 == 0 else ("accel", "raw"):
            proc = subprocess.run(
                [sys.executable, __file__, "--rss", side, "--folder", str(folder)],
                capture_output=True, text=True, check=True, env=dict(os.environ),
            )  # fmt: skip
            out[side].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--t0", default="0")
    parser.add_argument("--rss", choices=["raw", "accel"])
    parser.add_argument("--folder")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.rss:
        rss_once(args.rss, Path(args.folder))
        return
    from accelerate import dispatch_model, init_empty_weights, load_checkpoint_and_dispatch

    torch.manual_seed(0)
    x = torch.randn(BATCH, WIDTH)
    result: dict[str, object] = {"model_bytes": sum(p.numel() * 4 for p in build().parameters())}
    with tempfile.TemporaryDirectory(prefix="big-model-") as scratch, torch.no_grad():
        folder = Path(scratch)
        plain = build()
        save_file(
            {k: v.contiguous() for k, v in plain.state_dict().items()}, str(folder / "model.safetensors")
        )
        hooked = dispatch_model(build(), {"": "cpu"}, force_hooks=True)
        result["hooks"] = pairs(
            lambda: timed(lambda: plain(x), time.process_time),
            lambda: timed(lambda: hooked(x), time.process_time),
            repeats=30,
        )

        def raw_load() -> float:
            def load() -> None:
                with torch.device("meta"):  # raw PyTorch's own way to skip random initialisation
                    model = build()
                model.load_state_dict(load_file(str(folder / "model.safetensors")), assign=True)
                model(x)  # load_file maps the file lazily: the data is read here

            return timed(load, time.perf_counter)

        def accel_load() -> float:
            def load() -> None:
                with init_empty_weights():
                    model = build()
                load_checkpoint_and_dispatch(model, folder, device_map={"": "cpu"})(x)

            return timed(load, time.perf_counter)

        result["load"] = pairs(raw_load, accel_load, repeats=20)
        result["rss"] = rss_pairs(folder)
        with init_empty_weights():
            skeleton = build()
        on_disk = load_checkpoint_and_dispatch(
            skeleton,
            folder,
            device_map={str(i): "disk" for i in range(BLOCKS)},
            offload_folder=folder / "off",
        )
        blocks = [Block() for _ in range(BLOCKS)]  # compute modules whose weights are replaced per call

        def by_hand() -> torch.Tensor:
            h = x
            with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
                for i, block in enumerate(blocks):
                    weights = {name: handle.get_tensor(f"{i}.{name}") for name in ("up.weight", "up.bias",
                               "down.weight", "down.bias")}  # fmt: skip
                    h = torch.func.functional_call(block, weights, (h,))
            return h

        assert torch.equal(by_hand(), on_disk(x)) and torch.equal(by_hand(), plain(x))
        result["disk"] = pairs(
            lambda: timed(by_hand, time.process_time),
            lambda: timed(lambda: on_disk(x), time.process_time),
            repeats=10,
        )
    Path(args.out, "rank0.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
