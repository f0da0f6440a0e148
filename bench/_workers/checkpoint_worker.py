"""The checkpoint benchmark's process: ~300 MB of model + AdamW state, saved and loaded both ways.

Raw side: ``torch.save`` of the model's and the optimizer's state dicts (each file flushed and
fsynced); ``safetensors.torch.load_file`` + ``torch.load`` of the very files ``save_state`` wrote,
then ``load_state_dict`` (alone, and after an XXH3 of both files: the same work as a verified
load); and ``safetensors.torch.save_file`` (fsynced). Accelerate side:
``save_state`` (atomic commit: staging folder, checksums, manifest, renames, fsyncs), ``load_state``
(checksums verified) and ``save_model``. ``async``: the time ``save_state(async_save=True)`` blocks
against a synchronous ``save_state``; after each, the background write is waited for (untimed) and
the folder it committed is loaded and compared with the state at the call. The operations
alternate; DIR/rank0.json holds the wall seconds of each (disk I/O is the point here, so wall time,
not CPU time).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

WIDTH, LAYERS = 2048, 6  # 6 x 4.2 M parameters = 100 MB fp32; AdamW state doubles it twice over


def fsynced_save(obj: object, path: Path) -> None:
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scratch", required=True, help="folder on the disk to measure")
    parser.add_argument("--out", required=True)
    parser.add_argument("--t0", type=float, default=0.0)
    parser.add_argument("--width", type=int, default=WIDTH)
    parser.add_argument("--layers", type=int, default=LAYERS)
    parser.add_argument("--only", default="", help="comma-separated pairs to run (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    import xxhash
    from safetensors.torch import load_file, save_file

    from accelerate import Accelerator
    from accelerate.checkpointing.accelerator_io import wait_for_async_save

    accelerator = Accelerator(cpu=True)
    model = torch.nn.Sequential(*[torch.nn.Linear(args.width, args.width) for _ in range(args.layers)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    model(torch.randn(4, args.width)).sum().backward()
    optimizer.step()  # creates the optimizer state: exp_avg and exp_avg_sq
    optimizer.zero_grad()
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    nbytes += sum(
        v.numel() * v.element_size()
        for s in optimizer.state_dict()["state"].values()
        for v in s.values()
        if torch.is_tensor(v)
    )

    root = Path(tempfile.mkdtemp(prefix="ckpt-", dir=args.scratch))
    counter = iter(range(10**6))

    def fresh() -> Path:
        return root / f"c{next(counter)}"

    last: dict[str, Path] = {}

    def raw_save() -> None:
        d = fresh()
        d.mkdir()
        fsynced_save(model.state_dict(), d / "model.pt")
        fsynced_save(optimizer.state_dict(), d / "optimizer.pt")
        fsync_dir(d)
        last["raw"] = d

    def accel_save() -> None:
        d = fresh()
        accelerator.save_state(str(d))
        last["accel"] = d

    def raw_load() -> None:
        d = last["accel"]  # the same files load_state reads
        model.load_state_dict(load_file(d / "model.safetensors"))
        optimizer.load_state_dict(torch.load(d / "optimizer.bin", weights_only=True))

    def accel_load() -> None:
        accelerator.load_state(str(last["accel"]))

    def raw_load_hashed() -> None:
        # The same work as a verified load done by hand: XXH3 of every byte of the two files read
        # (as the manifest's checksums are), then the same loads.
        d = last["accel"]
        for name in ("model.safetensors", "optimizer.bin"):
            with open(d / name, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                xxhash.xxh3_64(mapped).hexdigest()
        raw_load()

    def raw_save_model() -> None:
        d = fresh()
        d.mkdir()
        save_file(model.state_dict(), d / "model.safetensors", metadata={"format": "pt"})
        with open(d / "model.safetensors", "rb+") as f:
            os.fsync(f.fileno())
        fsync_dir(d)

    def accel_save_model() -> None:
        accelerator.save_model(model, str(fresh()))

    async_checks: list[bool] = []

    def sync_save() -> None:
        accel_save()

    def async_save() -> None:
        d = fresh()
        expected = {k: v.clone() for k, v in model.state_dict().items()}
        start = time.perf_counter()
        accelerator.save_state(str(d), async_save=True)
        blocked.append(time.perf_counter() - start)
        with torch.no_grad():  # the loop goes on changing the state while the writer works
            for param in model.parameters():
                param.add_(1.0)
        wait_for_async_save()
        accelerator.load_state(str(d))
        loaded = model.state_dict()
        async_checks.append(all(torch.equal(loaded[k], expected[k]) for k in expected))

    blocked: list[float] = []

    pairs: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {
        "save": (raw_save, accel_save),
        "load": (raw_load, accel_load),
        "load_hashed": (raw_load_hashed, accel_load),
        "save_model": (raw_save_model, accel_save_model),
        "async": (sync_save, async_save),
    }
    model_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    result: dict[str, object] = {"bytes": nbytes, "model_bytes": model_bytes}
    only = [name for name in args.only.split(",") if name]
    for name, (raw, accel) in pairs.items():
        if only and name not in only:
            continue
        if name == "load" or (name == "load_hashed" and "accel" not in last):
            raw_save()
            accel_save()
        times: dict[str, list[float]] = {"raw": [], "accel": []}
        # Loads are short: more pairs steady their median on a shared machine.
        repeats = args.repeats * 3 if name.startswith("load") else args.repeats
        for i in range(repeats + 1):  # the first pair is a warm-up
            order = (("raw", raw), ("accel", accel)) if i % 2 == 0 else (("accel", accel), ("raw", raw))
            for side, fn in order:
                start = time.perf_counter()
                fn()
                if i > 0:
                    times[side].append(time.perf_counter() - start)
                    if name == "async" and side == "accel":
                        times[side][-1] = blocked[-1]  # only the time the loop was blocked
            if not name.startswith("load"):
                for path in list(root.iterdir()):
                    if path not in last.values():
                        shutil.rmtree(path, ignore_errors=True)
        result[name] = times
    result["async_loads_same"] = bool(async_checks) and all(async_checks)
    shutil.rmtree(root, ignore_errors=True)
    Path(args.out, "rank0.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
