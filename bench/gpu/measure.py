"""The GPU benchmark core: one side (ours or the installed upstream accelerate) against raw PyTorch.

Run as a script in its own process, one side per process, so the two ``accelerate`` packages never
meet: ``ours`` runs with this repository's ``src`` first on PYTHONPATH, ``upstream`` with no PYTHONPATH
(the installed package). Every metric is measured against a raw PyTorch loop in the same process, a
warm-up first, then repetitions alternating which goes first, ``torch.cuda.synchronize()`` around
every timing; a row reports the medians and the median of the per-repetition ratios side/raw.

Writes one JSON line per metric to ``--out``. Imports nothing from this repository but ``accelerate``
(so the upstream side can run it). ``--device cpu --tiny`` runs the same code path in seconds (CI).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
OURS_MARKER = "accelerator_facts.py"


@dataclasses.dataclass(frozen=True)
class Size:
    dim: int
    layers: int
    heads: int
    vocab: int
    batch: int
    seq: int
    steps: int  # optimizer steps per timed block
    repeats: int  # timed blocks / repetitions per metric
    warmup: int  # untimed steps of each loop before the step-time blocks
    big_width: int = 8192  # the save/load of a big model: big_layers square Linear layers
    big_layers: int = 4  # 8192 x 8192 x 4 = 268 M fp32 parameters: 1.07 GB, 3.2 GB with AdamW's moments


FULL = Size(dim=768, layers=12, heads=12, vocab=8192, batch=8, seq=512, steps=10, repeats=5, warmup=3)
TINY = Size(dim=32, layers=1, heads=2, vocab=64, batch=2, seq=8, steps=1, repeats=2, warmup=1,
            big_width=32, big_layers=1)  # fmt: skip


def build_model(size: Size, seed: int = 0) -> Any:
    """A GPT-like stack of plain torch layers (FULL: ~98M parameters); built under the current device context."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(size.dim), nn.LayerNorm(size.dim)
            self.qkv, self.proj = nn.Linear(size.dim, 3 * size.dim), nn.Linear(size.dim, size.dim)
            self.up, self.down = nn.Linear(size.dim, 4 * size.dim), nn.Linear(4 * size.dim, size.dim)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, size.heads, d // size.heads).permute(2, 0, 3, 1, 4)
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(size.vocab, size.dim)
            self.blocks = nn.ModuleList([Block() for _ in range(size.layers)])
            self.ln_f = nn.LayerNorm(size.dim)
            self.head = nn.Linear(size.dim, size.vocab, bias=False)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    torch.manual_seed(seed)
    return LM()


class Bench:
    """Shared pieces of one side's run: the device, the timer, the batch, the rows written."""

    def __init__(self, side: str, device: str, size: Size, out: Path, meta: dict[str, Any]) -> None:
        import torch

        self.torch = torch
        self.side, self.size, self.out, self.meta = side, size, out, meta
        self.device = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
        gen = torch.Generator().manual_seed(1)
        shape = (size.batch, size.seq)
        self.ids = torch.randint(0, size.vocab, shape, generator=gen).to(self.device)
        self.labels = torch.randint(0, size.vocab, shape, generator=gen).to(self.device)

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def timed(self, fn: Callable[[], Any]) -> float:
        self.sync()
        start = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - start

    def loss(self, logits: Any) -> Any:
        return self.torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), self.labels.flatten())

    def write(self, row: dict[str, Any]) -> None:
        with self.out.open("a") as file:
            file.write(json.dumps({**self.meta, **row}) + "\n")

    def pairs(self, metric: str, unit: str, scale: float, raw: Callable[[], float], side: Callable[[], float],
              repeats: int) -> None:  # fmt: skip
        """``repeats`` alternating (raw, side) measurements after the callers' warm-up; one row."""
        raws, sides = [], []
        for i in range(repeats):
            if i % 2 == 0:
                raws.append(raw())
                sides.append(side())
            else:
                sides.append(side())
                raws.append(raw())
        ratios = [s / r for s, r in zip(sides, raws) if r > 0]
        self.write({
            "metric": metric, "unit": unit, "status": "ok", "repeats": repeats,
            "median": statistics.median(sides) * scale, "raw_median": statistics.median(raws) * scale,
            "ratio_to_raw": statistics.median(ratios) if ratios else None,
            "samples": [s * scale for s in sides], "raw_samples": [r * scale for r in raws],
        })  # fmt: skip


def run_side(bench: Bench) -> None:
    """Every metric of this side; a metric that raises becomes an ``error`` row and the rest go on."""
    import torch

    import accelerate

    dev = bench.device
    accelerator = accelerate.Accelerator(mixed_precision="bf16", cpu=dev.type == "cpu")
    state: dict[str, Any] = {}
    workdir = Path(tempfile.mkdtemp(prefix=f"gpu-bench-{bench.side}-"))
    steps: list[tuple[str, Callable[[], None]]] = [
        ("step_bf16", lambda: _step_time(bench, accelerator, state)),
        ("save_state", lambda: _save_load(bench, accelerator, state, workdir)),
        ("save_state_1gb", lambda: _save_load_big(bench, accelerator, workdir)),
        ("prepare_first_step", lambda: _prepare_latency(bench, accelerator)),
        ("load_checkpoint_and_dispatch", lambda: _dispatch(bench, workdir)),
    ]
    try:
        for metric, fn in steps:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - reported as a row, the next metric still runs
                traceback.print_exc()
                reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                bench.write({"metric": metric, "status": "error", "reason": reason})
            if metric in ("save_state", "save_state_1gb"):
                state.clear()
                accelerator.free_memory()
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _step_time(bench: Bench, accelerator: Any, state: dict[str, Any]) -> None:
    torch, size, dev = bench.torch, bench.size, bench.device
    raw_model = build_model(size).to(dev)
    raw_opt = torch.optim.AdamW(raw_model.parameters(), lr=1e-4)
    model = build_model(size)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, opt = accelerator.prepare(model, opt)
    state.update(raw_model=raw_model, raw_opt=raw_opt, model=model, opt=opt)

    def raw_steps(n: int) -> None:
        for _ in range(n):
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                logits = raw_model(bench.ids)
            bench.loss(logits).backward()
            raw_opt.step()
            raw_opt.zero_grad(set_to_none=True)

    def acc_steps(n: int) -> None:
        for _ in range(n):
            accelerator.backward(bench.loss(model(bench.ids)))
            opt.step()
            opt.zero_grad(set_to_none=True)

    raw_steps(size.warmup)
    acc_steps(size.warmup)
    n = size.steps
    bench.pairs("step_bf16", "ms/step", 1000.0, lambda: bench.timed(lambda: raw_steps(n)) / n,
                lambda: bench.timed(lambda: acc_steps(n)) / n, size.repeats)  # fmt: skip


def _save_load(bench: Bench, accelerator: Any, state: dict[str, Any], workdir: Path) -> None:
    from safetensors.torch import load_file, save_file

    torch, dev = bench.torch, bench.device
    if "model" not in state:
        raise RuntimeError("the step-time metric did not prepare a model")
    raw_model, raw_opt = state["raw_model"], state["raw_opt"]
    counter = iter(range(1000))

    def raw_save() -> float:
        folder = workdir / f"raw-{next(counter)}"
        folder.mkdir()

        def save() -> None:
            save_file(
                {k: v.contiguous() for k, v in raw_model.state_dict().items()},
                str(folder / "model.safetensors"),
            )
            torch.save(raw_opt.state_dict(), folder / "optimizer.bin")

        took = bench.timed(save)
        state["raw_dir"] = folder
        return took

    def acc_save() -> float:
        folder = workdir / f"acc-{next(counter)}"
        took = bench.timed(lambda: accelerator.save_state(str(folder)))
        state["acc_dir"] = folder
        return took

    def raw_load() -> float:
        folder = state["raw_dir"]

        def load() -> None:
            raw_model.load_state_dict(load_file(str(folder / "model.safetensors"), device=str(dev)))
            raw_opt.load_state_dict(torch.load(folder / "optimizer.bin", map_location=dev, weights_only=True))

        return bench.timed(load)

    def acc_load() -> float:
        return bench.timed(lambda: accelerator.load_state(str(state["acc_dir"])))

    repeats = max(1, bench.size.repeats - 2)
    raw_save(), acc_save()  # warm-up (first writes of each kind)
    bench.pairs("save_state", "s", 1.0, raw_save, acc_save, repeats)
    bench.pairs("load_state", "s", 1.0, raw_load, acc_load, repeats)


def _fsynced_save(obj: Any, path: Path) -> None:
    import os

    import torch

    with open(path, "wb") as file:
        torch.save(obj, file)
        file.flush()
        os.fsync(file.fileno())


def _save_load_big(bench: Bench, accelerator: Any, workdir: Path) -> None:
    """A >= 1 GB fp32 model + AdamW: save_state vs torch.save + fsync of the same two state dicts
    (the price of durability on its own: upstream's save_state, measured the same way on the upstream
    side, does not fsync), then load_state vs torch.load + load_state_dict of those files."""
    import os

    torch, dev, size = bench.torch, bench.device, bench.size
    layers = [torch.nn.Linear(size.big_width, size.big_width) for _ in range(size.big_layers)]
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(2, size.big_width, device=dev)).sum().backward()
    opt.step()  # the optimizer's moments exist from here on
    opt.zero_grad(set_to_none=True)
    model, opt = accelerator.prepare(model, opt)
    counter = iter(range(1000))
    last: dict[str, Path] = {}

    def raw_save() -> float:
        folder = workdir / f"big-raw-{next(counter)}"
        folder.mkdir()

        def save() -> None:
            _fsynced_save(model.state_dict(), folder / "model.bin")
            _fsynced_save(opt.state_dict(), folder / "optimizer.bin")
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        took = bench.timed(save)
        _replace(last, "raw", folder)
        return took

    def acc_save() -> float:
        folder = workdir / f"big-acc-{next(counter)}"
        took = bench.timed(lambda: accelerator.save_state(str(folder)))
        _replace(last, "acc", folder)
        return took

    def raw_load() -> float:
        folder = last["raw"]

        def load() -> None:
            model.load_state_dict(torch.load(folder / "model.bin", map_location=dev, weights_only=True))
            opt.load_state_dict(torch.load(folder / "optimizer.bin", map_location=dev, weights_only=True))

        return bench.timed(load)

    def acc_load() -> float:
        return bench.timed(lambda: accelerator.load_state(str(last["acc"])))

    repeats = max(1, bench.size.repeats - 2)
    raw_save(), acc_save()  # warm-up (first writes of each kind; pinned host memory)
    gb = sum(t.numel() * t.element_size() for t in model.state_dict().values()) / 1e9
    bench.pairs("save_state_1gb", "s", 1.0, raw_save, acc_save, repeats)
    bench.pairs("load_state_1gb", "s", 1.0, raw_load, acc_load, repeats)
    print(f"big model: {gb:.2f} GB of fp32 parameters", flush=True)
    accelerator.free_memory()
    for folder in last.values():
        shutil.rmtree(folder, ignore_errors=True)


def _replace(last: dict[str, Path], key: str, folder: Path) -> None:
    """Keeps only the newest folder of each side (a few GB each)."""
    old = last.get(key)
    last[key] = folder
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _prepare_latency(bench: Bench, accelerator: Any) -> None:
    torch, size, dev = bench.torch, bench.size, bench.device

    def raw() -> float:
        model = build_model(size)

        def go() -> None:
            model.to(dev)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                logits = model(bench.ids)
            bench.loss(logits).backward()
            opt.step()

        return bench.timed(go)

    def side() -> float:
        model = build_model(size)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def go() -> None:
            prepared, popt = accelerator.prepare(model, opt)
            accelerator.backward(bench.loss(prepared(bench.ids)))
            popt.step()

        took = bench.timed(go)
        accelerator.free_memory()
        return took

    raw(), side()  # warm-up
    bench.pairs("prepare_first_step", "s", 1.0, raw, side, max(1, size.repeats - 2))


def _write_shards(bench: Bench, folder: Path, shards: int = 4) -> None:
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous() for k, v in build_model(bench.size).state_dict().items()}
    names = list(state)
    per = -(-len(names) // shards)
    weight_map: dict[str, str] = {}
    for i in range(shards):
        part = names[i * per : (i + 1) * per]
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({k: state[k] for k in part}, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def _dispatch(bench: Bench, workdir: Path) -> None:
    from safetensors.torch import load_file

    import accelerate

    torch, dev = bench.torch, bench.device
    folder = workdir / "sharded"
    folder.mkdir()
    _write_shards(bench, folder)
    target: int | str = 0 if dev.type == "cuda" else "cpu"

    def raw() -> float:
        def go() -> None:
            with torch.device("meta"):
                model = build_model(bench.size)
            for file in sorted(folder.glob("*.safetensors")):
                model.load_state_dict(load_file(str(file), device=str(dev)), strict=False, assign=True)

        return bench.timed(go)

    def side() -> float:
        def go() -> None:
            with accelerate.init_empty_weights():
                model = build_model(bench.size)
            accelerate.load_checkpoint_and_dispatch(model, str(folder), device_map={"": target})

        return bench.timed(go)

    raw(), side()  # warm-up (page cache, allocator)
    bench.pairs("load_checkpoint_and_dispatch", "s", 1.0, raw, side, max(1, bench.size.repeats - 2))


def _meta(side: str, device: str) -> dict[str, Any]:
    import torch

    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    return {"side": side, "device": device, "device_name": name, "torch_version": torch.__version__}


def _find_accelerate(side: str) -> tuple[Any, str | None]:
    """The ``accelerate`` module of this side, or the reason it is not available."""
    try:
        import accelerate
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        return None, f"import accelerate failed: {type(exc).__name__}: {exc}".splitlines()[0]
    location = Path(getattr(accelerate, "__file__", "") or "").resolve()
    # This repository's package, wherever it is imported from (an editable install of another checkout
    # included): it has a module upstream's does not.
    ours = REPO in location.parents or (location.parent / OURS_MARKER).is_file()
    if side == "upstream" and ours:
        return None, f"the importable accelerate is this repository's ({location}), not upstream's"
    if side == "ours" and not ours:
        return (
            None,
            f"the importable accelerate is not this repository's ({location}): is PYTHONPATH=src set?",
        )
    return accelerate, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=["ours", "upstream"], required=True)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a tiny model and few repetitions (CI, CPU)")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines file (appended)")
    args = parser.parse_args(argv)
    meta = _meta(args.side, args.device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    accelerate, reason = _find_accelerate(args.side)
    if accelerate is None:
        with args.out.open("a") as file:
            file.write(json.dumps({**meta, "status": "not available", "reason": reason}) + "\n")
        print(f"{args.side}: not available: {reason}")
        return 0
    meta.update(
        accelerate_version=getattr(accelerate, "__version__", "?"), accelerate_file=accelerate.__file__
    )
    bench = Bench(args.side, args.device, TINY if args.tiny else FULL, args.out, meta)
    run_side(bench)
    return 0


if __name__ == "__main__":
    sys.exit(main())
