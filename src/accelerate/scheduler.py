"""`AcceleratedScheduler`: advances the LR schedule only when the optimizer really stepped.

Why it may step ``num_processes`` times per call: a schedule is usually written for the
single-process run, counted in that run's optimizer steps. With N processes and
``split_batches=False`` every optimizer step consumes N per-process batches (the global batch is N
times larger), so the run has N times fewer optimizer steps; advancing the schedule N steps at a
time makes it finish, warm up and decay at the same point of the data. With ``split_batches=True``
the global batch size is unchanged and the schedule advances once per step. The count N comes
from the strategy (``Strategy.batches_stepped``): the number of processes, or for fault-tolerant
replica groups the batches the committed step really trained (the groups in its quorum, less the
weight-0 extras of an epoch's last round), so the learning rate follows the data position.

Under gradient accumulation the schedule only moves on sync steps (the learning rate matters only
when the optimizer steps). With ``adjust_scheduler=True`` (the default) it is written in optimizer
steps, as in a single-process accumulating loop; with ``adjust_scheduler=False`` it is written in
micro-batches and advances by the number of micro-steps accumulated. It never advances on a step
that fp16 loss scaling skipped, nor past the end of a fixed-length schedule (``OneCycleLR``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from accelerate.state.gradient import GradientState


class AcceleratedScheduler:
    """Wraps a ``torch.optim.lr_scheduler`` (or anything with ``step``/``state_dict``)."""

    def __init__(
        self,
        scheduler: Any,
        optimizers: Sequence[Any],
        step_with_optimizer: bool = True,
        split_batches: bool = False,
        *,
        num_processes: int = 1,
        gradient_state: GradientState | None = None,
        batches_stepped: Callable[[int], int] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.optimizers = list(optimizers)
        self.split_batches = split_batches
        self.step_with_optimizer = step_with_optimizer
        self.num_processes = num_processes
        # num_processes -> the batches the last optimizer step trained (Strategy.batches_stepped)
        self.batches_stepped = batches_stepped
        self.gradient_state = gradient_state or GradientState()
        self._micro_steps = 0  # non-sync micro-steps since the last optimizer step

    def step(self, *args: Any, **kwargs: Any) -> None:
        if not self.step_with_optimizer:
            self.scheduler.step(*args, **kwargs)
            return
        if not self.gradient_state.sync_gradients:
            # The learning rate only matters when the optimizer steps: nothing moves in between.
            self._micro_steps += 1
            return
        micro, self._micro_steps = self._micro_steps + 1, 0
        if any(getattr(opt, "step_was_skipped", False) for opt in self.optimizers):
            return
        # adjust_scheduler=False: the schedule counts micro-batches, so it catches up on all of
        # this accumulation window's micro-steps at once.
        per_process = 1 if self.gradient_state.adjust_scheduler else micro
        if self.split_batches:
            repeats = per_process
        elif self.batches_stepped is not None:
            repeats = per_process * self.batches_stepped(self.num_processes)
        else:
            repeats = per_process * self.num_processes
        total = getattr(self.scheduler, "total_steps", None)
        for _ in range(repeats):
            # Schedules with a fixed length (OneCycleLR) raise past their end; with N processes
            # the last optimizer step may ask for up to N - 1 steps more than the data had.
            if total is not None and self.scheduler.last_epoch >= total:
                break
            self.scheduler.step(*args, **kwargs)

    # --- pass-through ------------------------------------------------------------------------
    def get_last_lr(self) -> list[float]:
        return list(self.scheduler.get_last_lr())

    def get_lr(self) -> list[float]:
        return list(self.scheduler.get_lr())

    def state_dict(self) -> dict[str, Any]:
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def print_lr(self, *args: Any, **kwargs: Any) -> Any:
        return self.scheduler.print_lr(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # Anything else (last_epoch, base_lrs, ...) reads through to the wrapped scheduler.
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)

    def __repr__(self) -> str:
        return f"AcceleratedScheduler({self.scheduler!r})"
