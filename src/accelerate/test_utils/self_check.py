"""The self-check `accelerate test` runs through the launcher: ``python -m accelerate.test_utils.self_check``.

Each check is a small function that raises on a wrong answer (``Skip`` to say it does not apply).
Every check runs whatever happened before it, each process reports its own result, and the main
process prints one table (check x rank) and a verdict line. The exit code is 0 only if every check
passed on every process.

Only the public API is used (``Accelerator``, ``accelerate.utils`` collectives), so this exercises
what a user's script would.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch

from accelerate.test_utils.self_check_pipeline import (
    check_pipeline_save_load,
    check_pipeline_training,
    pipelined,
)

PASSED, FAILED, SKIPPED = "PASSED", "FAILED", "SKIPPED"
# Short enough that a check that leaves one process behind a collective fails instead of hanging.
COLLECTIVE_TIMEOUT = timedelta(seconds=120)


class Skip(Exception):
    """Raised by a check that does not apply to this configuration (the reason is shown)."""


class Context:
    """What the checks share: the Accelerator and the expected world size."""

    def __init__(self) -> None:
        from accelerate import Accelerator
        from accelerate.utils import InitProcessGroupKwargs

        self.accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=COLLECTIVE_TIMEOUT)])
        # Read independently of accelerate's own detection, to cross-check it against the launcher.
        self.expected_world = int(os.environ.get("WORLD_SIZE", "1"))


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


# --- the checks ---------------------------------------------------------------------------------------
def check_processes(ctx: Context) -> str:
    from accelerate.utils import gather_object

    acc = ctx.accelerator
    _expect(
        acc.num_processes == ctx.expected_world,
        f"num_processes={acc.num_processes}, but the launcher started {ctx.expected_world}",
    )
    ranks = gather_object([acc.process_index])
    _expect(
        sorted(ranks) == list(range(acc.num_processes)),
        f"process indices {ranks} are not 0..{acc.num_processes - 1}",
    )
    return f"{acc.num_processes} process(es), ranks {sorted(ranks)}"


def check_device(ctx: Context) -> str:
    acc = ctx.accelerator
    from accelerate.config.env import read_launch_env

    wants_cpu = bool(read_launch_env().cpu)
    if wants_cpu or not torch.cuda.is_available():
        _expect(acc.device.type in ("cpu", "mps", "xpu") if not wants_cpu else acc.device.type == "cpu",
                f"device is {acc.device}, expected the CPU")  # fmt: skip
    else:
        _expect(acc.device.type == "cuda", f"device is {acc.device}, expected a CUDA device")
        _expect(acc.device.index == acc.local_process_index % torch.cuda.device_count(),
                f"device {acc.device} does not match local rank {acc.local_process_index}")  # fmt: skip
    return str(acc.device)


def check_collectives(ctx: Context) -> str:
    from accelerate.utils import (
        broadcast,
        broadcast_object_list,
        gather,
        gather_object,
        pad_across_processes,
        reduce,
    )

    acc = ctx.accelerator
    n, rank, device = acc.num_processes, acc.process_index, acc.device
    mine = torch.tensor([float(rank)], device=device)
    gathered = gather(mine).cpu().tolist()
    _expect(gathered == [float(r) for r in range(n)], f"gather gave {gathered}")
    total = reduce(mine.clone(), reduction="sum").item()
    _expect(total == sum(range(n)), f"reduce(sum) gave {total}, expected {sum(range(n))}")
    mean = reduce(mine.clone(), reduction="mean").item()
    _expect(abs(mean - sum(range(n)) / n) < 1e-6, f"reduce(mean) gave {mean}")
    value = broadcast(torch.tensor([rank + 10.0], device=device), from_process=0).item()
    _expect(value == 10.0, f"broadcast from rank 0 gave {value}, expected 10.0")
    ragged = torch.ones(rank + 1, device=device)
    padded = pad_across_processes(ragged)
    _expect(padded.shape[0] == n, f"pad_across_processes gave length {padded.shape[0]}, expected {n}")
    objects = gather_object([{"rank": rank}])
    _expect([o["rank"] for o in objects] == list(range(n)), f"gather_object gave {objects}")
    box: list[Any] = [f"from {rank}"]
    broadcast_object_list(box, from_process=0)
    _expect(box == ["from 0"], f"broadcast_object_list gave {box}")
    return "gather, reduce, broadcast, pad_across_processes, gather_object, broadcast_object_list"


def check_dataloader(ctx: Context) -> str:
    from torch.utils.data import DataLoader

    acc = ctx.accelerator
    length = 19  # not a multiple of any small world size: exercises the uneven last batch
    samples: Any = list(range(length))
    loader = acc.prepare(DataLoader(samples, batch_size=2))
    seen: list[int] = []
    collected: list[int] = []
    for batch in loader:
        seen += batch.tolist()
        collected += acc.gather_for_metrics(batch).cpu().tolist()
    from accelerate.utils import gather_object

    everyone = gather_object([seen])
    flat = [x for share in everyone for x in share]
    _expect(set(flat) == set(range(length)), f"the shards do not cover the dataset: {sorted(set(flat))}")
    if _data_shards(acc) > 1:
        _expect(len(set(seen)) < length, "every process saw the whole dataset (no sharding)")
    group = acc.num_processes // _data_shards(acc)  # ranks of one tensor/context-parallel group: neighbours
    if group > 1:
        mates = everyone[acc.process_index - acc.process_index % group :][:group]
        _expect(all(share == seen for share in mates),
                f"the {group} ranks of one tensor-parallel group read different batches: {mates}")  # fmt: skip
    _expect(sorted(collected) == list(range(length)),
            f"gather_for_metrics returned {len(collected)} samples {sorted(collected)}, expected 0..{length - 1} once each")  # fmt: skip
    same = f"; the {group} ranks of each tensor-parallel group read the same batches" if group > 1 else ""
    return f"{len(seen)} of {length} samples on this process{same}; gather_for_metrics exact"


def _regression_data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, generator=generator)
    y = x @ torch.tensor([[2.0], [-1.0], [0.5]]) + 0.3
    return x, y


def _fresh_model(tensor_parallel: bool = False) -> torch.nn.Module:
    """The regression model; under tensor parallelism one with a hidden layer, as a single output
    column cannot be split across ranks (Megatron's MLP: split the hidden units, then join them)."""
    torch.manual_seed(42)
    if not tensor_parallel:
        return torch.nn.Linear(3, 1)
    return torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _mesh_text(acc: Any) -> str:
    """The run's ParallelismConfig mesh, e.g. "dp_shard=2 x tp=2" ("" without one)."""
    mesh = acc.torch_device_mesh if getattr(acc, "parallelism_config", None) is not None else None
    if mesh is None or not mesh.mesh_dim_names:
        return ""
    return " x ".join(f"{n}={s}" for n, s in zip(mesh.mesh_dim_names, mesh.shape, strict=True))


def _tensor_parallel(acc: Any) -> bool:
    config = getattr(acc, "parallelism_config", None)
    return config is not None and bool(config.tp_enabled)


def _apply_tensor_parallel(acc: Any, model: torch.nn.Module) -> torch.nn.Module:
    """Splits ``model`` on the ``tp`` sub-mesh the way a user's script must before ``prepare()``.

    A two-layer MLP is split column-wise then row-wise; a lone Linear column-wise with its output
    gathered back, so callers see whole tensors either way.
    """
    if not _tensor_parallel(acc):
        return model
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan: Any = (
        {"0": ColwiseParallel(), "2": RowwiseParallel()}
        if isinstance(model, torch.nn.Sequential)
        else ColwiseParallel(output_layouts=Replicate())
    )
    return parallelize_module(model, acc.torch_device_mesh["tp"], plan)


def _data_shards(acc: Any) -> int:
    """How many different batches one step reads: every rank of a tensor-parallel group reads the same."""
    config = getattr(acc, "parallelism_config", None)
    return int(config.data_parallel_size) if config is not None else int(acc.num_processes)


def _flat(model: torch.nn.Module) -> torch.Tensor:
    """Every parameter, whole (gathered where sharded), flattened into one CPU vector."""
    return torch.cat([_full(p).flatten().cpu() for p in model.parameters()])


def _reference_weights(
    per_process_batch: int, world: int, epochs: int, tensor_parallel: bool = False
) -> torch.Tensor:
    """One process, plain PyTorch, on the global batch that `world` data shards make together."""
    x, y = _regression_data()
    model = _fresh_model(tensor_parallel)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = per_process_batch * world
    for _ in range(epochs):
        for start in range(0, len(x), batch):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x[start : start + batch]), y[start : start + batch]).backward()
            optimizer.step()
    return _flat(model).detach()


def _full(parameter: torch.Tensor) -> torch.Tensor:
    """The whole tensor: under FSDP each process holds a shard (a DTensor), so the same promise (training
    matches the 1-process reference) is checked on the gathered parameter. A collective on every rank."""
    tensor = parameter.detach()
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor


def check_training(ctx: Context) -> str:
    from torch.utils.data import DataLoader, TensorDataset

    acc = ctx.accelerator
    if acc.mixed_precision != "no":
        raise Skip(
            f"mixed_precision={acc.mixed_precision} changes the numbers; compared in full precision only"
        )
    if pipelined(acc):  # the loss runs inside the schedule: a stack of blocks, model(x, labels=y)
        detail, ctx.trained = check_pipeline_training(acc)  # type: ignore[attr-defined]
        return detail
    per_process_batch, epochs = 4, 3
    x, y = _regression_data()
    tensor_parallel = _tensor_parallel(acc)
    model = _apply_tensor_parallel(acc, _fresh_model(tensor_parallel))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(x, y), batch_size=per_process_batch)
    model, optimizer, loader = acc.prepare(model, optimizer, loader)
    for _ in range(epochs):
        for inputs, targets in loader:
            optimizer.zero_grad()
            acc.backward(torch.nn.functional.mse_loss(model(inputs), targets))
            optimizer.step()
    plain: Any = acc.unwrap_model(model)
    sharded = all(hasattr(p, "full_tensor") for p in plain.parameters())
    if _type_name(acc) == "FSDP" and acc.num_processes > 1:
        _expect(sharded, "under FSDP, prepare() left the model's parameters unsharded (plain tensors)")
    ours = _flat(plain)
    reference = _reference_weights(per_process_batch, _data_shards(acc), epochs, tensor_parallel)
    _expect(torch.allclose(ours, reference, atol=1e-5),
            f"parameters {ours.tolist()} differ from the 1-process reference {reference.tolist()}")  # fmt: skip
    ctx.trained = (model, optimizer)  # type: ignore[attr-defined]
    if tensor_parallel:
        where = f", tensor-parallel model on the mesh {_mesh_text(acc)}"
    else:
        where = f", parameters sharded over {acc.num_processes} processes" if sharded else ""
    return f"{epochs} epochs match the 1-process reference{where}"


def check_mixed_precision(ctx: Context) -> str:
    acc = ctx.accelerator
    if acc.mixed_precision == "no":
        raise Skip("mixed_precision is 'no'")
    if pipelined(acc):
        raise Skip("under a pipeline the precision is the stages'; not checked on its own")
    if acc.mixed_precision == "fp8":
        return _check_fp8(ctx)
    expected = {"fp16": torch.float16, "bf16": torch.bfloat16}[acc.mixed_precision]
    # Prepared with its optimizer in one call (DeepSpeed builds one engine from both); when training was
    # skipped, save/load then round-trips this model, so no backend ever holds two engines.
    plain_layer = _apply_tensor_parallel(acc, torch.nn.Linear(8, 8))
    layer, optimizer = acc.prepare(plain_layer, torch.optim.SGD(plain_layer.parameters(), lr=0.1))
    if getattr(ctx, "trained", None) is None:
        ctx.trained = (layer, optimizer)  # type: ignore[attr-defined]
    x = torch.randn(4, 8, device=acc.device)
    with acc.autocast():
        inner = torch.nn.functional.linear(x, torch.randn(8, 8, device=acc.device))
    _expect(
        inner.dtype == expected,
        f"under accelerator.autocast() a matmul gave {inner.dtype}, expected {expected}",
    )
    out = layer(x)  # the prepared model computes in low precision and returns fp32
    _expect(out.dtype == torch.float32, f"a prepared model returned {out.dtype}, expected torch.float32")
    return f"autocast computes in {expected}; prepared models return float32"


def _check_fp8(ctx: Context) -> str:
    """fp8: prepare() swaps the middle layer of a small MLP for the fp8 library's, and a step runs."""
    acc = ctx.accelerator
    torch.manual_seed(0)
    # The first and last linear stay in high precision under the default filter: the middle one converts.
    plain = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.Linear(16, 8)
    )
    model, optimizer = acc.prepare(plain, torch.optim.SGD(plain.parameters(), lr=0.1))
    if getattr(ctx, "trained", None) is None:
        ctx.trained = (model, optimizer)  # type: ignore[attr-defined]
    middle = type(acc.unwrap_model(model).get_submodule("2")).__name__
    _expect(middle != "Linear", "fp8: prepare() left the eligible middle linear layer unconverted")
    out = model(torch.randn(4, 8, device=acc.device))
    _expect(out.dtype == torch.float32, f"an fp8 model returned {out.dtype}, expected torch.float32")
    acc.backward(out.square().mean())
    optimizer.step()
    optimizer.zero_grad()
    return f"fp8 ({acc.fp8_backend.value}): the eligible layer became {middle}; a step ran"


def check_save_load(ctx: Context) -> str:
    from accelerate.utils import broadcast_object_list

    acc = ctx.accelerator
    trained = getattr(ctx, "trained", None)
    if pipelined(acc) and trained is None:
        raise Skip("the pipeline check did not train a model to save")
    if trained is None:
        # One prepare() call: DeepSpeed builds its engine from the model and its optimizer together.
        fresh = _apply_tensor_parallel(acc, _fresh_model(_tensor_parallel(acc)))
        model, optimizer = acc.prepare(fresh, torch.optim.SGD(fresh.parameters(), lr=0.1))
    else:
        model, optimizer = trained
    box: list[Any] = [tempfile.mkdtemp(prefix="accelerate-self-check-") if acc.is_main_process else None]
    broadcast_object_list(box, from_process=0)
    folder = str(box[0])
    try:
        if pipelined(acc):
            check_pipeline_save_load(acc, model, optimizer, folder)
            return "save_state/load_state round trip of the pipeline's stages"
        acc.save_state(folder)
        acc.wait_for_everyone()
        plain = acc.unwrap_model(model)
        saved = [p.detach().clone() for p in plain.parameters()]
        with torch.no_grad():
            for p in plain.parameters():
                p.add_(1.0)
        acc.load_state(folder)
        restored = all(torch.equal(a, b.detach()) for a, b in zip(saved, plain.parameters()))
        _expect(restored, "load_state did not restore the saved parameters")
    finally:
        acc.wait_for_everyone()
        if acc.is_main_process:
            shutil.rmtree(folder, ignore_errors=True)
    return "save_state/load_state round trip"


CHECKS: list[tuple[str, Callable[[Context], str]]] = [
    ("processes and ranks", check_processes),
    ("device", check_device),
    ("collectives", check_collectives),
    ("dataloader sharding + gather_for_metrics", check_dataloader),
    ("training matches 1 process", check_training),
    ("mixed precision", check_mixed_precision),
    ("save_state / load_state", check_save_load),
]


def run_checks(ctx: Context) -> list[tuple[str, str, str]]:
    """Runs every check on this process; returns (name, status, detail) for each."""
    results = []
    for name, check in CHECKS:
        try:
            results.append((name, PASSED, check(ctx)))
        except Skip as skip:
            results.append((name, SKIPPED, str(skip)))
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}"
            print(
                f"[rank {ctx.accelerator.process_index}] check '{name}' failed:\n{traceback.format_exc()}",
                file=sys.stderr,
            )
            results.append((name, FAILED, detail))
    return results


def format_report(
    per_rank: list[list[tuple[str, str, str]]], mixed_precision: str, distributed_type: str | None = None
) -> tuple[str, bool]:
    """The table (one row per check, the status on every rank) and whether everything passed."""
    backend = f", distributed_type={distributed_type}" if distributed_type else ""
    lines = [
        f"accelerate self-check: {len(per_rank)} process(es){backend}, mixed_precision={mixed_precision}",
        "",
    ]
    ok = True
    for index, (name, _, _) in enumerate(per_rank[0]):
        statuses = [results[index][1] for results in per_rank]
        status = (
            FAILED if FAILED in statuses else (SKIPPED if all(s == SKIPPED for s in statuses) else PASSED)
        )
        ok = ok and status != FAILED
        detail = per_rank[0][index][2]
        if status == FAILED:
            failing = [rank for rank, s in enumerate(statuses) if s == FAILED]
            detail = "; ".join(f"rank {r}: {per_rank[r][index][2]}" for r in failing)
        lines.append(f"  {status:<8} {name:<42} {detail}")
    lines.append("")
    lines.append(
        "VERDICT: all checks passed." if ok else "VERDICT: FAILED (see the rows marked FAILED above)."
    )
    return "\n".join(lines), ok


def _type_name(accelerator: Any) -> str:
    kind = accelerator.distributed_type
    return str(getattr(kind, "value", kind))


def main() -> int:
    try:
        ctx = Context()
    except Exception:
        print(
            "accelerate self-check: could not create an Accelerator:\n" + traceback.format_exc(),
            file=sys.stderr,
        )
        print("VERDICT: FAILED (no Accelerator).")
        return 1
    results = run_checks(ctx)
    from accelerate.utils import gather_object

    try:
        per_rank = gather_object([results]) if ctx.accelerator.num_processes > 1 else [results]
    except Exception as exc:  # the processes lost each other: report what this one knows
        per_rank = [results]
        print(
            f"accelerate self-check: could not collect the other processes' results: {exc}", file=sys.stderr
        )
    kind, mesh = _type_name(ctx.accelerator), _mesh_text(ctx.accelerator)
    kind = f"{kind}, mesh {mesh}" if mesh else kind
    report, ok = format_report(per_rank, ctx.accelerator.mixed_precision, kind)
    if ctx.accelerator.is_main_process:
        print(report, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
