"""What the user's loop holds under DeepSpeed: the engine, optimizer and scheduler wrappers, and the stand-ins.

The wrappers map the user's unchanged loop onto a DeepSpeed engine: ``accelerator.backward(loss)``
runs ``engine.backward`` and, on the last micro-step of an accumulation window, ``engine.step``
(which clips, steps the optimizer and the scheduler, and zeroes the gradients). The wrapped
optimizer's and scheduler's own ``step``/``zero_grad`` therefore do nothing. ``DummyOptim`` /
``DummyScheduler`` stand for an optimizer/scheduler that the DeepSpeed config file defines, and
:func:`map_pytorch_optim_to_deepspeed` swaps a torch optimizer for DeepSpeed's CPU kernels when ZeRO
offloads the optimizer. ``accelerate.utils.deepspeed`` re-exports these under upstream's names.
"""

from __future__ import annotations

from typing import Any

import torch

from accelerate.backends.deepspeed.runtime import import_deepspeed
from accelerate.optimizer import AcceleratedOptimizer
from accelerate.scheduler import AcceleratedScheduler


class DeepSpeedEngineWrapper:
    """Runs ``backward`` (and, at the end of an accumulation window, the step) through ``engine``."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def backward(self, loss: torch.Tensor, sync_gradients: bool = True, **kwargs: Any) -> None:
        # DeepSpeed divides the loss by its gradient_accumulation_steps itself, and reduces the
        # gradients (ZeRO) only at a window boundary: tell it where the window ends.
        self.engine.set_gradient_accumulation_boundary(is_boundary=sync_gradients)
        self.engine.backward(loss, **kwargs)
        if sync_gradients:
            # Clipping, the optimizer step, the scheduler step, zeroing the gradients, overflow checks.
            self.engine.step()

    def get_global_grad_norm(self) -> float | None:
        """The gradient norm of the last step (before clipping), as DeepSpeed computed it."""
        norm = self.engine.get_global_grad_norm()
        if isinstance(norm, torch.Tensor):
            norm = norm.item()
        return None if norm is None else float(norm)


class DeepSpeedOptimizerWrapper(AcceleratedOptimizer):
    """The engine's optimizer: ``step``/``zero_grad`` are done by the engine inside ``backward``."""

    def __init__(self, optimizer: Any) -> None:
        super().__init__(optimizer, device_placement=False, scaler=None)
        self.__has_overflow__ = hasattr(self.optimizer, "overflow")

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        pass  # the engine zeroes the gradients after its step

    def step(self) -> None:  # type: ignore[override]  # upstream's signature: the engine took the step
        return None  # the engine stepped in accelerator.backward

    @property
    def step_was_skipped(self) -> bool:
        """True when DeepSpeed skipped the last step (fp16 overflow)."""
        return bool(self.__has_overflow__ and getattr(self.optimizer, "overflow", False))

    @property
    def is_overflow(self) -> bool:
        return self.step_was_skipped


class DeepSpeedSchedulerWrapper(AcceleratedScheduler):
    """The engine's scheduler: the engine steps it with the optimizer, inside ``backward``."""

    owned_by_engine = True  # saved and loaded inside the engine's checkpoint

    def __init__(self, scheduler: Any, optimizers: Any) -> None:
        super().__init__(scheduler, optimizers)

    def step(self) -> None:  # upstream's signature: no arguments
        pass  # stepped by engine.step()


class DummyOptim:
    """Stands for the optimizer that the DeepSpeed config's ``"optimizer"`` section defines.

    ``lr`` and ``weight_decay`` fill that section's ``"auto"`` values.

    Example:
        >>> optimizer = DummyOptim(model.parameters(), lr=3e-4)
    """

    def __init__(self, params: Any, lr: float = 0.001, weight_decay: float = 0, **kwargs: Any) -> None:
        self.params = params
        self.lr = lr
        self.weight_decay = weight_decay
        self.kwargs = kwargs


class DummyScheduler:
    """Stands for the scheduler that the DeepSpeed config's ``"scheduler"`` section defines.

    ``total_num_steps`` and ``warmup_num_steps`` fill that section's ``"auto"`` values; with
    ``lr_scheduler_callable`` (``optimizer -> scheduler``) the scheduler is built from the engine's optimizer.
    """

    def __init__(
        self, optimizer: Any, total_num_steps: int | None = None, warmup_num_steps: int = 0,
        lr_scheduler_callable: Any = None, **kwargs: Any,
    ) -> None:  # fmt: skip
        self.optimizer = optimizer
        self.total_num_steps = total_num_steps
        self.warmup_num_steps = warmup_num_steps
        self.lr_scheduler_callable = lr_scheduler_callable
        self.kwargs = kwargs


def map_pytorch_optim_to_deepspeed(optimizer: torch.optim.Optimizer) -> Any:
    """The DeepSpeed CPU-offload optimizer matching a torch optimizer (Adam/AdamW → DeepSpeedCPUAdam,
    Adagrad → DeepSpeedCPUAdagrad), with the same parameter groups and hyper-parameters.

    Used when ZeRO offloads the optimizer to the CPU, where DeepSpeed's own kernels run the step.
    Other optimizers come back unchanged.
    """
    defaults = {k: v for k, v in optimizer.defaults.items() if k in ("lr", "weight_decay", "betas", "eps")}
    deepspeed = import_deepspeed()
    if isinstance(optimizer, torch.optim.AdamW | torch.optim.Adam):
        adam_w = isinstance(optimizer, torch.optim.AdamW)
        return deepspeed.ops.adam.DeepSpeedCPUAdam(optimizer.param_groups, adamw_mode=adam_w, **defaults)
    if isinstance(optimizer, torch.optim.Adagrad):
        defaults.pop("betas", None)
        return deepspeed.ops.adagrad.DeepSpeedCPUAdagrad(optimizer.param_groups, **defaults)
    return optimizer
