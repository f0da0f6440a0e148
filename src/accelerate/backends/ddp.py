"""DistributedDataParallel on gloo (CPU) or NCCL (CUDA)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from accelerate.backends.base import Strategy
from accelerate.state.distributed_type import DistributedType
from accelerate.state.teardown import release_at_exit
from accelerate.utils.dataclasses import DDPCommunicationHookType, DistributedDataParallelKwargs


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

    def setup_module(self, model: torch.nn.Module, *, device_placement: bool) -> torch.nn.Module:
        model = super().setup_module(model, device_placement=device_placement)
        if isinstance(model, DistributedDataParallel):
            release_at_exit(model, release_process_group)
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
        self._register_comm_hook(ddp)
        release_at_exit(ddp, release_process_group)
        return ddp

    def _register_comm_hook(self, ddp: DistributedDataParallel) -> None:
        hook_type = DDPCommunicationHookType(self.ddp_kwargs.comm_hook)
        wrapper_type = DDPCommunicationHookType(self.ddp_kwargs.comm_wrapper)
        if hook_type is DDPCommunicationHookType.NO:
            if wrapper_type is not DDPCommunicationHookType.NO:
                raise ValueError(
                    f"DistributedDataParallelKwargs(comm_wrapper={wrapper_type.value!r}) wraps a PowerSGD hook; "
                    "set comm_hook='power_sgd' or 'batched_power_sgd' too, or drop comm_wrapper."
                )
            return
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

        if hook_type in (DDPCommunicationHookType.FP16, DDPCommunicationHookType.BF16):
            if wrapper_type is not DDPCommunicationHookType.NO:
                raise ValueError(
                    f"DistributedDataParallelKwargs(comm_wrapper={wrapper_type.value!r}) only applies to the "
                    f"PowerSGD hooks; comm_hook={hook_type.value!r} already compresses. Drop comm_wrapper."
                )
            hook: Any = (
                default_hooks.fp16_compress_hook
                if hook_type is DDPCommunicationHookType.FP16
                else default_hooks.bf16_compress_hook
            )
            ddp.register_comm_hook(state=None, hook=hook)
            return
        state = powerSGD_hook.PowerSGDState(process_group=None, **self.ddp_kwargs.comm_state_option)
        hook = (
            powerSGD_hook.powerSGD_hook
            if hook_type is DDPCommunicationHookType.POWER_SGD
            else powerSGD_hook.batched_powerSGD_hook
        )
        if wrapper_type is DDPCommunicationHookType.FP16:
            hook = default_hooks.fp16_compress_wrapper(hook)
        elif wrapper_type is DDPCommunicationHookType.BF16:
            hook = default_hooks.bf16_compress_wrapper(hook)
        elif wrapper_type is not DDPCommunicationHookType.NO:
            raise ValueError(
                f"DistributedDataParallelKwargs(comm_wrapper={wrapper_type.value!r}) must be 'no', 'fp16' or 'bf16'."
            )
        ddp.register_comm_hook(state=state, hook=hook)

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.module if isinstance(model, DistributedDataParallel) else model

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        if isinstance(model, DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def sync_in_backward(self, model: torch.nn.Module) -> Iterator[None]:
        # DDP decides at forward time whether the next backward all-reduces; inside no_sync it
        # would not. Setting the flags for this block makes its backward communicate.
        if not isinstance(model, DistributedDataParallel):
            yield
            return
        old_backward, old_forward = model.require_backward_grad_sync, model.require_forward_param_sync
        model.require_backward_grad_sync = True
        model.require_forward_param_sync = True
        try:
            yield
        finally:
            model.require_backward_grad_sync, model.require_forward_param_sync = old_backward, old_forward


def release_process_group(ddp: DistributedDataParallel) -> None:
    """Drops the wrapper's references to its process group (at exit; the wrapper is unusable after).

    Until they go, the group (and gloo's worker threads) outlive destroy_process_group(); see
    accelerate.state.teardown for why the threads must end before the interpreter finalises.
    """
    for name in ("logger", "reducer", "process_group"):
        ddp.__dict__.pop(name, None)
