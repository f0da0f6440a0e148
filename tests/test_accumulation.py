"""Gradient accumulation against real prepared dataloaders and real DDP communication."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from tests.helpers.pool import WorkerPool
from tests.training_helpers import make_model


def _sync_pattern(num_batches: int, k: int) -> list[bool]:
    accelerator = Accelerator(gradient_accumulation_steps=k)
    data = TensorDataset(torch.randn(num_batches * 2 * accelerator.num_processes, 8))
    loader = accelerator.prepare(DataLoader(data, batch_size=2))
    model = accelerator.prepare(make_model())
    pattern = []
    for (x,) in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(x).sum())
            pattern.append(accelerator.sync_gradients)
    return pattern


def test_partial_last_accumulation_syncs_at_end_of_dataloader() -> None:
    assert _sync_pattern(10, 4) == [False, False, False, True] * 2 + [False, True]


def test_partial_last_accumulation_syncs_in_two_processes(pool2: WorkerPool) -> None:
    expected = [False, False, True] * 2 + [True]
    assert pool2.run(_sync_pattern, 7, 3) == [expected, expected]


def _no_sync_and_trigger() -> list[bool]:
    import torch.distributed as dist

    accelerator = Accelerator()
    model = accelerator.prepare(make_model())
    calls: list[int] = []

    # Unannotated on purpose: DDP inspects the hook's annotations at registration.
    def hook(state, bucket):  # type: ignore[no-untyped-def]
        calls.append(1)
        return (
            dist.all_reduce(bucket.buffer().div_(2), async_op=True).get_future().then(lambda f: f.value()[0])
        )

    model.register_comm_hook(None, hook)
    seen = []
    x = torch.ones(2, 8)
    with accelerator.no_sync(model):
        accelerator.backward(model(x).sum())
    seen.append(bool(calls))
    with accelerator.no_sync(model), accelerator.trigger_sync_in_backward(model):
        accelerator.backward(model(x).sum())
    seen.append(bool(calls))
    return seen


def test_no_sync_and_trigger_sync_in_backward(pool2: WorkerPool) -> None:
    assert pool2.run(_no_sync_and_trigger) == [[False, True]] * 2


def test_accumulate_several_models() -> None:
    accelerator = Accelerator(gradient_accumulation_steps=2)
    a, b = make_model(0), make_model(1)
    opt = torch.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.1)
    a, b, opt = accelerator.prepare(a, b, opt)
    x = torch.ones(2, 8)
    before = [p.detach().clone() for p in b.parameters()]
    with accelerator.accumulate(a, b):
        accelerator.backward(F.mse_loss(a(x), b(x).detach()) + b(x).sum())
        opt.step()
    assert all(torch.equal(p, q) for p, q in zip(before, b.parameters(), strict=True))
    with accelerator.accumulate(a, b):
        accelerator.backward(b(x).sum())
        opt.step()
    assert not all(torch.equal(p, q) for p, q in zip(before, b.parameters(), strict=True))


def _local_batches(rank: int, world: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    from tests.training_helpers import global_batches, local_rows

    return [(local_rows(x, rank, world), local_rows(y, rank, world)) for x, y in global_batches(2, 8)]


def _torch_ddp_grads(handler_kwargs: dict[str, object], scale: float = 1.0) -> list[torch.Tensor]:
    """The reference: torch's own DDP, two forwards, the summed loss, one backward."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(make_model(), **handler_kwargs)  # type: ignore[arg-type]
    (xa, ya), (xb, yb) = _local_batches(dist.get_rank(), dist.get_world_size())
    loss = F.mse_loss(ddp(xa), ya) + F.mse_loss(ddp(xb), yb)
    (loss * scale).backward()
    return [p.grad.detach().clone() for p in ddp.parameters()]  # type: ignore[union-attr]


def _accelerate_grads(case: str, handler_kwargs: dict[str, object]) -> list[list[torch.Tensor]]:
    from accelerate.utils import DistributedDataParallelKwargs

    k = 2 if case == "accumulate" else 1
    accelerator = Accelerator(
        kwargs_handlers=[DistributedDataParallelKwargs(**handler_kwargs)],  # type: ignore[arg-type]
        gradient_accumulation_steps=k,
    )
    model = accelerator.prepare(make_model())
    (xa, ya), (xb, yb) = _local_batches(accelerator.process_index, accelerator.num_processes)
    if case == "two_forwards":
        loss = F.mse_loss(model(xa), ya) + F.mse_loss(model(xb), yb)
        accelerator.backward(loss)
    elif case == "no_sync_then_trigger":
        # Upstream's documented pattern: forwards under no_sync, the last backward forced to sync.
        with accelerator.no_sync(model):
            loss_a = F.mse_loss(model(xa), ya)
            loss_b = F.mse_loss(model(xb), yb)
        accelerator.backward(loss_a)
        with accelerator.trigger_sync_in_backward(model):
            accelerator.backward(loss_b)
    elif case == "accumulate":
        # A non-sync accumulation step whose last backward is forced to sync.
        with accelerator.accumulate(model):
            assert not accelerator.sync_gradients
            loss_a = F.mse_loss(model(xa), ya)
            loss_b = F.mse_loss(model(xb), yb)
            accelerator.backward(loss_a)
            with accelerator.trigger_sync_in_backward(model):
                accelerator.backward(loss_b)
    got = [p.grad.detach().clone() for p in model.parameters()]
    accelerator.free_memory()
    want = _torch_ddp_grads(handler_kwargs, scale=1.0 / k)
    return [got, want]


@pytest.mark.parametrize("case", ["two_forwards", "no_sync_then_trigger", "accumulate"])
@pytest.mark.parametrize(
    "handler_kwargs",
    [
        {},
        {"find_unused_parameters": True},
        {"bucket_cap_mb": 1, "gradient_as_bucket_view": True},
        {"static_graph": True},
    ],
)
def test_gradients_equal_torch_ddp(pool2: WorkerPool, case: str, handler_kwargs: dict[str, object]) -> None:
    if handler_kwargs.get("static_graph") and case != "two_forwards":
        pytest.skip("torch's static_graph DDP asserts on a backward of a forward run under no_sync")
    for rank, (got, want) in enumerate(pool2.run(_accelerate_grads, case, handler_kwargs)):
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, msg=lambda m, r=rank: f"rank {r} ({case}): {m}")
