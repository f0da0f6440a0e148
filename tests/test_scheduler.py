from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin
from tests.helpers.pool import WorkerPool
from tests.training_helpers import global_batches, make_model


def _scheduler_steps(
    micro_steps: int, accumulation: int, split_batches: bool, adjust: bool = True, with_optimizer: bool = True
) -> int:
    plugin = GradientAccumulationPlugin(num_steps=accumulation, adjust_scheduler=adjust)
    accelerator = Accelerator(
        gradient_accumulation_plugin=plugin,
        dataloader_config=DataLoaderConfiguration(split_batches=split_batches),
        step_scheduler_with_optimizer=with_optimizer,
    )
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    for x, y in global_batches(micro_steps, 4):
        with accelerator.accumulate(model):
            accelerator.backward(F.mse_loss(model(x), y))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    return int(scheduler.last_epoch)


# With the schedule not tied to the optimizer, it steps on micro-steps before any optimizer step;
# torch warns about that order, which is exactly what this case sets up.
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
@pytest.mark.parametrize(
    ("micro", "k", "split", "adjust", "with_opt", "expected"),
    [
        (6, 1, False, True, True, 6),
        (6, 3, False, True, True, 2),  # only sync steps advance the schedule
        (6, 3, True, True, True, 2),
        (6, 3, False, False, True, 6),  # adjust_scheduler=False: every call advances
        (6, 3, False, True, False, 6),  # not tied to the optimizer: plain pass-through
    ],
)
def test_scheduler_steps_one_process(
    micro: int, k: int, split: bool, adjust: bool, with_opt: bool, expected: int
) -> None:
    assert _scheduler_steps(micro, k, split, adjust, with_opt) == expected


def test_scheduler_steps_two_processes(pool2: WorkerPool) -> None:
    # N processes, split_batches=False: N schedule steps per optimizer step.
    assert pool2.run(_scheduler_steps, 6, 1, False) == [12, 12]
    assert pool2.run(_scheduler_steps, 6, 3, False) == [4, 4]
    # split_batches=True: the global batch is unchanged, one schedule step per optimizer step.
    assert pool2.run(_scheduler_steps, 6, 3, True) == [2, 2]


def test_accumulation_step_and_zero_grad_do_nothing_on_micro_steps() -> None:
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    (x, y), (x2, y2) = global_batches(2, 4)
    with accelerator.accumulate(model):
        accelerator.backward(F.mse_loss(model(x), y))
        assert not accelerator.sync_gradients
        before = [p.detach().clone() for p in model.parameters()]
        optimizer.step()
        optimizer.zero_grad()
        assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
        assert all(p.grad is not None for p in model.parameters())
    with accelerator.accumulate(model):
        accelerator.backward(F.mse_loss(model(x2), y2))
        assert accelerator.sync_gradients
        optimizer.step()
        optimizer.zero_grad()
        assert all(p.grad is None for p in model.parameters())


def _warmup_decay(step: int) -> float:
    # 4 warm-up steps, then linear decay to 0 at step 12 (in single-process optimizer steps).
    return (step + 1) / 4 if step < 4 else max(0.0, (12 - step) / 8)


def _lr_after_each_step(steps: int, split_batches: bool = False) -> list[float]:
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(split_batches=split_batches))
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup_decay)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    lrs = []
    for x, y in global_batches(steps, 4):
        accelerator.backward(F.mse_loss(model(x), y))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        lrs.append(round(scheduler.get_last_lr()[0], 6))
    return lrs


def test_warmup_decay_schedule_lines_up_with_the_data_on_two_processes(pool2: WorkerPool) -> None:
    one = _lr_after_each_step(12)
    assert one[:6] == [0.25, 0.375, 0.5, 0.5, 0.4375, 0.375]  # really warms up, then decays
    # Two processes see twice the data per optimizer step: after step j they are where one process
    # is after step 2j, so warm-up ends and decay reaches 0 at the same point of the data.
    for lrs in pool2.run(_lr_after_each_step, 6):
        assert lrs == one[1::2]
    # split_batches=True keeps the global batch: the schedule advances once per step, as written.
    for lrs in pool2.run(_lr_after_each_step, 6, True):
        assert lrs == one[:6]


def _one_cycle_lrs(step_with_optimizer: bool, split_batches: bool = False) -> list[float]:
    # As upstream's scheduler check: the user's code sets the optimizer's overflow flag itself.
    accelerator = Accelerator(
        step_scheduler_with_optimizer=step_with_optimizer,
        dataloader_config=DataLoaderConfiguration(split_batches=split_batches),
    )
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda n: 1 - n / 10)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    lrs = []
    optimizer._is_overflow = False  # the optimizer stepped
    scheduler.step()
    lrs.append(round(scheduler.get_last_lr()[0], 6))
    optimizer._is_overflow = True  # the optimizer step was skipped
    assert optimizer.step_was_skipped
    scheduler.step()
    lrs.append(round(scheduler.get_last_lr()[0], 6))
    return lrs


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_scheduler_skips_when_the_user_sets_the_overflow_flag() -> None:
    # Tied to the optimizer: the skipped step does not move the schedule.
    assert _one_cycle_lrs(True) == [0.9, 0.9]
    # Not tied: it steps on every call regardless.
    assert _one_cycle_lrs(False) == [0.9, 0.8]


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_scheduler_skipped_step_and_untied_stepping_on_two_processes(pool2: WorkerPool) -> None:
    # Tied, split_batches=False: num_processes schedule steps per call, none on a skipped step.
    assert pool2.run(_one_cycle_lrs, True) == [[0.8, 0.8]] * 2
    # Tied, split_batches=True: one schedule step per call.
    assert pool2.run(_one_cycle_lrs, True, True) == [[0.9, 0.9]] * 2
    # Not tied to the optimizer: exactly one schedule step per call, on every process.
    assert pool2.run(_one_cycle_lrs, False) == [[0.9, 0.8]] * 2


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_scheduler_does_not_step_after_an_fp16_overflow_skip() -> None:
    accelerator = Accelerator()
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda n: 1 - n / 10)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    optimizer._is_overflow = True
    assert accelerator.optimizer_step_was_skipped
    scheduler.step()
    assert scheduler.last_epoch == 0


def test_a_strategy_counting_batches_per_step_drives_the_schedule_unless_split_batches() -> None:
    """Fault-tolerant groups: the schedule advances by the batches each committed step trained
    (Strategy.batches_stepped), once per step with split_batches=True, never on a skipped step."""
    from accelerate.scheduler import AcceleratedScheduler

    class _Optimizer:
        step_was_skipped = False

    optimizer = torch.optim.SGD(make_model().parameters(), lr=1.0)
    for split, expected in ((False, 6), (True, 3)):
        fake = _Optimizer()
        counts = [3, 2, 1]  # e.g. 3 groups, a group lost, the epoch's last round with one real batch
        scheduler = AcceleratedScheduler(
            torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0),
            [fake],
            split_batches=split,
            num_processes=2,  # not what counts: the strategy answers
            batches_stepped=lambda _n, counts=counts: counts.pop(0),
        )
        for _ in range(3):
            scheduler.step()
        fake.step_was_skipped = True
        scheduler.step()  # skipped: no advance
        assert scheduler.last_epoch == expected
