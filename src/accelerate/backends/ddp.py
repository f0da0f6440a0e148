"""DistributedDataParallel on gloo (CPU) or NCCL (CUDA).

Hang diagnosis: DDP all-reduces the gradients inside ``backward`` (its reducer's bucket hooks), out
of reach of the collective slot every accelerate collective enters. So ``Accelerator.backward``
enters the slot around the backpropagation (:meth:`DDPStrategy.backward_scope`): a rank whose peer
never reaches its backward then waits in a recorded operation, its watchdog reports it and raises
the flag, and the launcher's summary names the peer that is missing and where it is, instead of
gloo's receive timeout blaming the rank that waited. A backward that will not all-reduce (every
wrapped model inside ``no_sync``, as on the off steps of ``accumulate()``) is not recorded: a long
local backward there must not be reported as a hang. It costs the slot's few attribute writes per
backward: no comm hook (the user's own ``register_comm_hook`` and ``DistributedDataParallelKwargs
(comm_hook=...)`` are left alone), no communication. Not covered: ``loss.backward()`` called
directly instead of ``accelerator.backward(loss)``.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from accelerate.backends.base import Strategy
from accelerate.backends.spec import BackendSpec, BuildContext
from accelerate.diagnostics.watchdog import SLOT
from accelerate.state.distributed_type import DistributedType
from accelerate.state.teardown import release_at_exit
from accelerate.utils.dataclasses import DistributedDataParallelKwargs

# The operation the hang report names for a rank in DDP's backward (see the module docstring).
GRADIENT_ALL_REDUCE = "backward (DDP's gradient all-reduce)"


class DDPStrategy(Strategy):
    name = "ddp"

    def __init__(
        self,
        device: torch.device,
        distributed_type: DistributedType,
        ddp_kwargs: DistributedDataParallelKwargs | None = None,
    ) -> None:
        super().__init__(device, distributed_type)
        self.ddp_kwargs = ddp_kwargs or DistributedDataParallelKwargs()
        # DDP models inside trigger_sync_in_backward that prepare their reducer at the backward.
        self._sync_pending: list[DistributedDataParallel] = []
        # The DDP models this strategy wrapped, whose backward all-reduces (see backward_scope). Weak
        # references in a list, not a WeakSet: backward_scope scans them on every micro-step, and a
        # WeakSet's iterator costs several Python calls each time.
        self._wrapped: list[weakref.ref[DistributedDataParallel]] = []

    def setup_module(self, model: torch.nn.Module, *, device_placement: bool) -> torch.nn.Module:
        model = super().setup_module(model, device_placement=device_placement)
        if isinstance(model, DistributedDataParallel):
            release_at_exit(model, release_process_group)
            self._remember(model)
            return model
        if not any(p.requires_grad for p in model.parameters()):
            # DDP refuses modules without trainable parameters (frozen teachers, metrics):
            # they need no gradient sync, so they stay unwrapped.
            return model
        kwargs: dict[str, Any] = self.ddp_kwargs.ddp_kwargs()
        if self.device.type == "cuda":
            kwargs.setdefault("device_ids", [self.device.index or 0])
            kwargs.setdefault("output_device", self.device.index or 0)
        ddp = DistributedDataParallel(model, **kwargs)
        self.ddp_kwargs.register_comm_hook(ddp)
        release_at_exit(ddp, release_process_group)
        self._remember(ddp)
        return ddp

    def _remember(self, model: DistributedDataParallel) -> None:
        live = [ref for ref in self._wrapped if ref() is not None and ref() is not model]
        self._wrapped = [*live, weakref.ref(model)]

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.module if isinstance(model, DistributedDataParallel) else model

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        if isinstance(model, DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def sync_in_backward(self, model: torch.nn.Module) -> Iterator[None]:
        # DDP decides at forward time whether the next backward all-reduces: a forward run inside
        # no_sync left the reducer unprepared, and flipping the flags alone leaves that backward
        # local. As upstream, the reducer is also prepared here, so a backward of an output computed
        # earlier (under no_sync) all-reduces; a forward inside this block prepares it again itself.
        if not isinstance(model, DistributedDataParallel):
            yield
            return
        old_backward, old_forward = model.require_backward_grad_sync, model.require_forward_param_sync
        model.require_backward_grad_sync = True
        model.require_forward_param_sync = True
        if model.find_unused_parameters:
            # Finding the unused parameters needs the graph's outputs: the loss, known only at
            # Accelerator.backward (see before_backward). Preparing with none marks them all unused.
            self._sync_pending.append(model)
        else:
            model.reducer.prepare_for_backward([])
        try:
            yield
        finally:
            model.require_backward_grad_sync, model.require_forward_param_sync = old_backward, old_forward
            if model in self._sync_pending:
                self._sync_pending.remove(model)

    def before_backward(self, loss: torch.Tensor) -> None:
        for model in self._sync_pending:
            model.reducer.prepare_for_backward([loss])

    def backward_scope(self) -> contextlib.AbstractContextManager[Any]:
        """The collective slot entered for the backward (see the module docstring).

        Skipped when no wrapped model will all-reduce: each is inside ``no_sync`` (its
        ``require_backward_grad_sync`` is off) and none is in ``trigger_sync_in_backward``. A
        forward run outside ``no_sync`` whose backward runs inside it does all-reduce unrecorded; the
        process group's own timeout still ends such a hang.
        """
        if self._sync_pending:
            return SLOT.enter(GRADIENT_ALL_REDUCE)
        for ref in self._wrapped:  # a plain loop: this runs on every micro-step
            model = ref()
            if model is not None and model.require_backward_grad_sync:
                return SLOT.enter(GRADIENT_ALL_REDUCE)
        return super().backward_scope()


def release_process_group(ddp: DistributedDataParallel) -> None:
    """Drops the wrapper's references to its process group (at exit; the wrapper is unusable after).

    Until they go, the group (and gloo's worker threads) outlive destroy_process_group(); see
    accelerate.state.teardown for why the threads must end before the interpreter finalises.
    """
    for name in ("logger", "reducer", "process_group"):
        ddp.__dict__.pop(name, None)


class DDPSpec(BackendSpec):
    """The table's row for several processes that no sharding backend claimed."""

    def strategy(self, context: BuildContext) -> Strategy:
        return DDPStrategy(context.partial.device, context.partial.distributed_type, context.ddp_kwargs)


spec = DDPSpec()
