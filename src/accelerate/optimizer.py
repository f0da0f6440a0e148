"""`AcceleratedOptimizer`: steps only on sync steps, through the precision's scaler.

It stays off the hot path: ``step`` and ``zero_grad`` read two attributes and call through; no
signature inspection or imports happen per step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from accelerate.diagnostics.watchdog import SLOT
from accelerate.precision.amp import Precision
from accelerate.state.gradient import GradientState
from accelerate.utils.lomo import is_lomo_optimizer
from accelerate.utils.tree import send_to_device


class StepHook(Protocol):
    """What the optimizer asks of the backend's Strategy (``Strategy.optimizer_step``): run ``step`` on a
    sync step, with whatever the backend communicates around it (XLA all-reduces the gradients there)."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer, step: Callable[[], Any]) -> Any: ...


def move_to_device(state: Any, device: torch.device | str | int) -> Any:
    """An optimizer state (dict) with every tensor in it moved to ``device``, structure unchanged.

    Example:
        >>> optimizer.load_state_dict(move_to_device(optimizer.state_dict(), "cuda:0"))
    """
    return send_to_device(state, device)


def patch_optimizer_step(accelerated_optimizer: Any, method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` wrapped to record, on ``accelerated_optimizer``, that a step was really called.

    Each call sets ``accelerated_optimizer._accelerate_step_called = True`` and then calls ``method``;
    code that must know whether the underlying step ran (a GradScaler may skip it) resets the flag
    before and reads it after.

    Example:
        >>> optimizer.optimizer.step = patch_optimizer_step(optimizer, optimizer.optimizer.step)
    """

    def patched_step(*args: Any, **kwargs: Any) -> Any:
        accelerated_optimizer._accelerate_step_called = True
        return method(*args, **kwargs)

    patched_step.__wrapped__ = method  # type: ignore[attr-defined]
    return patched_step


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps a user's optimizer.

    ``step()`` and ``zero_grad()`` do nothing on gradient-accumulation micro-steps; under fp16 the
    step goes through the GradScaler, which may skip it (see :attr:`step_was_skipped`).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        device_placement: bool = True,
        scaler: Any = None,
        *,
        precision: Precision | None = None,
        gradient_state: GradientState | None = None,
        device: torch.device | None = None,
        strategy: StepHook | None = None,
    ) -> None:
        # Deliberately no super().__init__: this object forwards to the wrapped optimizer.
        self.optimizer = optimizer
        self.precision = precision
        self.scaler = precision.scaler if precision is not None else scaler
        self.gradient_state = gradient_state or GradientState()
        self.device_placement = device_placement
        # The backend's Strategy, when it acts at the step (XLA all-reduces the gradients there).
        self.strategy = strategy
        # Upstream's name for the flag; user code (and upstream's own tests) set it directly.
        self._is_overflow = False
        if device_placement and device is not None and optimizer.state:
            # State loaded before prepare (a resumed run) must live where the parameters now are.
            optimizer.load_state_dict(move_to_device(optimizer.state_dict(), device))

    @property
    def accelerator_state(self) -> Any:
        """The process's :class:`~accelerate.state.AcceleratorState` (upstream keeps it on the optimizer)."""
        from accelerate.state import AcceleratorState

        return AcceleratorState()

    # --- pass-through attributes ----------------------------------------------------------
    @property
    def state(self) -> Any:
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = value

    @property
    def defaults(self) -> dict[str, Any]:
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.optimizer.defaults = value

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"

    # --- the training step ------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """Zeroes the gradients on sync steps only (micro-steps keep accumulating them).

        ``set_to_none=None`` means torch's default (True).
        """
        if self.gradient_state.sync_gradients:
            self.optimizer.zero_grad(set_to_none=True if set_to_none is None else set_to_none)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if not self.gradient_state.sync_gradients or is_lomo_optimizer(self.optimizer):
            return None  # (LOMO updated the parameters inside Accelerator.lomo_backward)
        SLOT.step += 1  # the step a hang report names
        if self.strategy is not None:
            result = self.strategy.optimizer_step(self.optimizer, lambda: self._step(closure))
            if getattr(self.strategy, "step_was_skipped", False):
                self._is_overflow = True  # the backend skipped it (a quorum that did not commit)
            return result
        return self._step(closure)

    def _step(self, closure: Callable[[], Any] | None) -> Any:
        if self.precision is None:
            self._is_overflow = False
            return self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        result = self.precision.step(self.optimizer, closure)
        self._is_overflow = self.precision.step_was_skipped
        return result

    def train(self) -> None:
        """For schedule-free optimizers, which switch parameters between train and eval points."""
        train = getattr(self.optimizer, "train", None)
        if callable(train):
            train()

    def eval(self) -> None:
        evaluate = getattr(self.optimizer, "eval", None)
        if callable(evaluate):
            evaluate()

    @property
    def step_was_skipped(self) -> bool:
        """True when the last sync step was skipped because fp16 gradients overflowed."""
        return self._is_overflow

    @property
    def is_overflow(self) -> bool:
        return self._is_overflow
