"""join_uneven_inputs: DDP training where one process has fewer batches finishes without hanging."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.distributed.algorithms.join import Joinable, JoinHook
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator, DistributedType
from accelerate.backends.join import join_uneven_inputs
from accelerate.data_loader import DataLoaderDispatcher
from tests.helpers.pool import WorkerPool


def _uneven_training(even_batches: bool | None) -> dict[str, object]:
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # 5 samples, batch 1: rank 0 gets 3 batches, rank 1 gets 2 unless even_batches completes the round.
    loader = DataLoader(TensorDataset(torch.randn(5, 4), torch.randn(5, 1)), batch_size=1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    steps = 0
    with accelerator.join_uneven_inputs([model], even_batches=even_batches):
        inside = loader.batch_sampler.even_batches
        for x, y in loader:
            optimizer.zero_grad()
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            steps += 1
    return {"steps": steps, "even_inside": inside, "even_after": loader.batch_sampler.even_batches}


def test_uneven_inputs_finish_on_both_ranks(pool2: WorkerPool) -> None:
    results = pool2.run(_uneven_training, False)
    assert [r["steps"] for r in results] == [3, 2]
    assert all(r["even_inside"] is False and r["even_after"] is True for r in results)
    assert [r["steps"] for r in pool2.run(_uneven_training, None)] == [3, 3]


def test_one_process_runs_the_block_as_it_is() -> None:
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as upstream: nothing to join and nothing to say in one process
        with accelerator.join_uneven_inputs([model]):
            model(torch.ones(1, 2))
        with accelerator.join_uneven_inputs([model], even_batches=False):
            pass


class _Joinable(Joinable):
    def __init__(self) -> None:
        super().__init__()

    def join_hook(self, **kwargs: object) -> JoinHook:
        return JoinHook()

    @property
    def join_device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def join_process_group(self) -> object:
        return None


def test_upstreams_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib

    import accelerate.backends.join as join_module

    seen: list[dict[str, object]] = []
    monkeypatch.setattr(
        join_module, "Join", lambda joinables, **kw: seen.append(kw) or contextlib.nullcontext()
    )
    # Another distributed setup (FSDP, DeepSpeed, XLA): the block runs as it is, with upstream's warning.
    with (
        pytest.warns(UserWarning, match="only supported for multi-GPU training"),
        join_uneven_inputs([_Joinable()], dataloaders=[], distributed_type="FSDP", even_batches=None),
    ):
        pass
    # A dispatching loader keeps its even_batches when the block overrides it, with upstream's warning.
    dispatcher = object.__new__(DataLoaderDispatcher)
    with (
        pytest.warns(UserWarning, match="Overridding even_batches is only supported for map-style datasets"),
        join_uneven_inputs(
            [_Joinable()],
            dataloaders=[dispatcher],
            distributed_type=DistributedType.MULTI_CPU,
            even_batches=True,
        ),
    ):
        pass
    # Join shadows collectives only when the loaders do not even out the batches (as upstream).
    assert seen == [{"enable": False, "throw_on_early_termination": False}]
