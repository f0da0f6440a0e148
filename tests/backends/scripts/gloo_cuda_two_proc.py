"""Two launched processes sharing one GPU, over gloo with CUDA tensors (NCCL refuses two ranks on one device).

Each check runs on both ranks and records "ok" or its error, so one unsupported operation does not hide
the others; every rank writes rank<N>.json into argv[1]. Self-contained (only accelerate and torch).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs, broadcast, gather, reduce


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def main(out: Path) -> None:
    acc = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(backend="gloo")])
    rank, dev = acc.process_index, acc.device
    checks: dict[str, str] = {}

    def check(name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
            checks[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - recorded; the test names it
            checks[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]

    def do_gather() -> None:
        got = gather(torch.tensor([float(rank)], device=dev))
        assert got.device.type == "cuda" and got.tolist() == [0.0, 1.0], got

    def do_reduce() -> None:
        got = reduce(torch.tensor([rank + 1.0], device=dev), reduction="sum")
        assert got.device.type == "cuda" and got.item() == 3.0, got

    def do_broadcast() -> None:
        got = broadcast(torch.tensor([rank + 10.0], device=dev), from_process=1)
        assert got.device.type == "cuda" and got.item() == 11.0, got

    prepared: dict[str, object] = {}

    def do_ddp_step() -> None:
        model = make_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = acc.prepare(model, optimizer)
        assert type(model).__name__ == "DistributedDataParallel", type(model)
        gen = torch.Generator().manual_seed(rank)  # different data per rank: the gradients are averaged
        x, y = torch.randn(4, 8, generator=gen).to(dev), torch.randn(4, 2, generator=gen).to(dev)
        acc.backward(F.mse_loss(model(x), y))
        optimizer.step()
        params = flat(model)
        both = gather(params.unsqueeze(0))
        assert torch.equal(both[0], both[1]), "the ranks' parameters differ after a DDP step"
        assert not torch.equal(params, flat(make_model()).to(dev)), "the step changed nothing"
        prepared.update(model=model)

    def do_save_load() -> None:
        model = prepared["model"]
        assert isinstance(model, torch.nn.Module)
        acc.save_state(str(out / "ckpt"))
        saved = flat(model).clone()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
        acc.load_state(str(out / "ckpt"))
        assert torch.equal(flat(model), saved)
        assert all(p.device.type == "cuda" for p in model.parameters())

    for name, fn in [("gather", do_gather), ("reduce", do_reduce), ("broadcast", do_broadcast),
                     ("ddp_step", do_ddp_step), ("save_load_state", do_save_load)]:  # fmt: skip
        check(name, fn)
    result = {"rank": rank, "num_processes": acc.num_processes, "backend": dist.get_backend(),
              "device": str(dev), "checks": checks}  # fmt: skip
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    acc.end_training()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
