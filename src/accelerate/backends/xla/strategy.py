"""`XLAStrategy`: one process per XLA device (TPU, or torch_xla's CPU device under PJRT).

Nothing is wrapped around the model: each process holds a full replica on its XLA device. What
DDP does in backward happens at the optimizer step instead: the gradients are all-reduced (averaged
over the processes, torch_xla's ``reduce_gradients``) just before the step, or earlier when gradient
clipping needs the global gradients (then ``GradientState.is_xla_gradients_synced`` says so and the
step does not reduce them twice). Prepared loaders feed the device
(:class:`~accelerate.backends.xla.loader.MpDeviceLoaderWrapper`), cutting the recorded graph between
steps. Under bf16 the strategy sets torch_xla's storage switch when it is built, before any model
is moved (:mod:`accelerate.backends.xla.precision`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from accelerate.backends.base import Strategy
from accelerate.backends.xla.precision import apply_bf16_env
from accelerate.state.distributed_type import DistributedType
from accelerate.state.gradient import GradientState

if TYPE_CHECKING:
    from accelerate.backends.xla.checkpoint_io import XlaCheckpointIO


class XLAStrategy(Strategy):
    name = "xla"
    loader_moves_batches = True

    def __init__(
        self,
        device: torch.device,
        num_processes: int,
        *,
        mixed_precision: str = "no",
        downcast_bf16: bool = False,
    ) -> None:
        super().__init__(device, DistributedType.XLA)
        self.num_processes = num_processes
        # torch_xla reads its bf16 switch when tensors are created: set here, before prepare moves a model.
        apply_bf16_env(mixed_precision, downcast_bf16)

    def checkpoint_io(self, run: Any = None) -> XlaCheckpointIO:
        """The default I/O, copying XLA tensors to the CPU before they are written (as ``xm.save``)."""
        from accelerate.backends.xla.checkpoint_io import XlaCheckpointIO

        return XlaCheckpointIO()  # no FSDP plugin on XLA: DTensor models (if any) save sharded

    def _reduce_gradients(self, gradients: list[torch.Tensor]) -> None:
        """Averages ``gradients`` over the processes, in place, once per step."""
        state = GradientState()
        if self.num_processes > 1 and not state.is_xla_gradients_synced and gradients:
            import torch_xla.core.xla_model as xm

            xm.all_reduce(xm.REDUCE_SUM, gradients, scale=1.0 / self.num_processes)
        state.is_xla_gradients_synced = True

    def optimizer_step(self, optimizer: torch.optim.Optimizer, step: Callable[[], Any]) -> Any:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        self._reduce_gradients(grads)
        try:
            return step()
        finally:
            # The next accumulation window starts with gradients that are local again.
            GradientState().is_xla_gradients_synced = False

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        # The norm must be the global gradient's: reduce first (the step then skips its reduction).
        parameters = list(parameters)
        self._reduce_gradients([p.grad for p in parameters if p.grad is not None])
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Iterable[torch.Tensor], clip_value: float) -> None:
        parameters = list(parameters)
        self._reduce_gradients([p.grad for p in parameters if p.grad is not None])
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    def wrap_dataloader(self, dataloader: Any) -> Any:
        from accelerate.backends.xla.loader import MpDeviceLoaderWrapper

        return MpDeviceLoaderWrapper(dataloader, self.device)
