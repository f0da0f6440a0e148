"""`LocalSGD`: processes train on their own and average their parameters every few steps.

Plain data parallelism all-reduces gradients on every backward. Local SGD skips that: inside the
context each process updates its own copy of the model (DDP's gradient all-reduce is switched off),
and every ``local_sgd_steps`` calls to :meth:`LocalSGD.step` the parameters are averaged across
processes. Leaving the context averages once more, so every process ends with the same model.

Example:
    >>> with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=8) as local_sgd:
    ...     for x, y in loader:
    ...         accelerator.backward(loss_fn(model(x), y))
    ...         optimizer.step()
    ...         optimizer.zero_grad()
    ...         local_sgd.step()
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import Any, Protocol

import torch

from accelerate.collectives.operations import reduce


class LocalSGDHost(Protocol):
    """What LocalSGD uses of the `Accelerator` that prepared the model (a test may pass a stand-in)."""

    @property
    def num_processes(self) -> int: ...

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]: ...

    def wait_for_everyone(self) -> None: ...

    def unwrap_model(self, model: torch.nn.Module) -> torch.nn.Module: ...


class LocalSGD:
    """Averages ``model``'s parameters across processes every ``local_sgd_steps`` steps.

    Args:
        accelerator: the `Accelerator` that prepared ``model``.
        model: the prepared model.
        local_sgd_steps: optimizer steps between two averagings (a positive int).
        enabled: False makes the context and ``step()`` do nothing (plain training).

    In one process there is nothing to average and nothing changes.
    """

    def __init__(
        self, accelerator: LocalSGDHost, model: torch.nn.Module, local_sgd_steps: int, enabled: bool = True
    ) -> None:
        if not isinstance(local_sgd_steps, int) or isinstance(local_sgd_steps, bool) or local_sgd_steps < 1:
            raise ValueError(f"LocalSGD(local_sgd_steps={local_sgd_steps!r}) must be a positive int")
        self.accelerator = accelerator
        self.model = model
        self.local_sgd_steps = local_sgd_steps
        self.enabled = bool(enabled) and accelerator.num_processes > 1
        self.num_steps = 0
        self._no_sync: contextlib.ExitStack | None = None

    def __enter__(self) -> LocalSGD:
        if self.enabled:
            self._no_sync = contextlib.ExitStack()
            self._no_sync.enter_context(self.accelerator.no_sync(self.model))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._no_sync is not None:
            self._no_sync.close()
            self._no_sync = None
        if self.enabled and exc_type is None:
            # Every process leaves with the same model. (After an error some processes may not
            # get here, so no collective then: it would hang the others.)
            self._average()

    def step(self) -> None:
        """Counts one optimizer step; on every ``local_sgd_steps``-th, averages the parameters."""
        if not self.enabled:
            return
        self.num_steps += 1
        if self.num_steps % self.local_sgd_steps == 0:
            self._average()

    @torch.no_grad()
    def _average(self) -> None:
        self.accelerator.wait_for_everyone()
        params = [p for p in self.accelerator.unwrap_model(self.model).parameters()]
        averaged: list[Any] = reduce([p.data for p in params], reduction="mean")
        for param, mean in zip(params, averaged, strict=True):
            param.data.copy_(mean)
