"""The fault-tolerant strategy: replica groups of one or more processes, gradients averaged through torchft.

``prepare`` wraps the model in torch's DDP over the group's own processes (a one-process stand-in
when it has one), with a comm hook of ours (``Runtime.comm_hook``) that averages each gradient
bucket inside the group, then across the healthy replica groups through torchft's manager, and
reports an error of the latter to it instead of raising. torchft's own DDP wrapper
asserts in its hook when a peer dies mid-exchange and so kills the survivors; this hook returns a
completed future either way. The optimizer steps only when the quorum commits (``optimizer_step``);
the data loader draws by committed position (``loader.py``). torchft is imported on first use.

With FSDP2 inside the group (``--use_fsdp --fsdp_version 2``) the FSDP strategy shards the model
and syncs inside the group; this one keeps the quorum, the exchange of the gradient shards across
groups and healing by shard (``shards.py``), and hands the rest (unwrap, no_sync, clipping,
checkpoints) to it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

import torch

from accelerate.backends.base import Strategy
from accelerate.backends.fault_tolerance.runtime import Runtime
from accelerate.utils.fault_tolerance import FaultToleranceKwargs


class FaultTolerantStrategy(Strategy):
    """One replica group of a fault-tolerant run (see the module doc)."""

    name = "fault_tolerant"

    def __init__(
        self,
        device: torch.device,
        settings: FaultToleranceKwargs,
        distributed_type: Any = None,
        *,
        group_rank: int = 0,
        group_size: int = 1,
        sharding: Strategy | None = None,
    ) -> None:
        if distributed_type is None:
            super().__init__(device)
        else:
            super().__init__(device, distributed_type)
        self.settings = settings
        self.runtime = Runtime(settings, group_rank, group_size)
        self.runtime.device = device
        # FSDP2 inside the group: that strategy shards the models and syncs inside the group; the
        # exchange across groups and healing work by shard (``shards.py``).
        self.sharding = sharding
        self.runtime.sharded = sharding is not None

    def setup_module(self, model: torch.nn.Module, *, device_placement: bool) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel
        from torchft.process_group import ProcessGroupDummy

        if self.sharding is not None:
            model = self.sharding.setup_module(model, device_placement=device_placement)
            if not any(model is known for known in self.runtime.models):
                self.runtime.models.append(model)
                # prepend: before FSDP2's own pre-forward all-gather, so a healed shard is what it gathers
                model.register_forward_pre_hook(self._before_forward, prepend=True)
            return model
        model = super().setup_module(model, device_placement=device_placement)
        if any(model is known for known in self.runtime.models):
            return model
        self.runtime.models.append(model)
        # DDP over the group's processes (the default process group; a one-process stand-in when
        # alone): its buckets and no_sync, our hook for the exchange. find_unused_parameters keeps
        # the buckets fixed, so a healed group's match its peers'.
        group = ProcessGroupDummy(0, 1) if self.runtime.group_size == 1 else None
        wrapped = DistributedDataParallel(model, process_group=group, find_unused_parameters=True)
        # A lambda: torch checks a hook's annotations, which this module's postponed ones would fail.
        wrapped.register_comm_hook(None, lambda state, bucket: self.runtime.comm_hook(state, bucket))
        # Quorum (and healing) before the forward: weights change only between steps.
        wrapped.register_forward_pre_hook(self._before_forward)
        return wrapped

    def _before_forward(self, module: torch.nn.Module, _args: Any) -> None:
        if module.training and torch.is_grad_enabled():
            self.runtime.begin_step()

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.sharding is not None:
            return self.sharding.unwrap(model)
        inner = getattr(model, "module", None)
        return inner if isinstance(inner, torch.nn.Module) and inner in self.runtime.models else model

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        if self.sharding is not None:
            self.sharding.setup_optimizer(optimizer)
        if optimizer not in self.runtime.optimizers:
            self.runtime.optimizers.append(optimizer)

    def setup_scheduler(self, scheduler: Any) -> None:
        if not any(scheduler is known for known in self.runtime.schedulers):
            self.runtime.schedulers.append(scheduler)

    def batches_stepped(self, num_processes: int) -> int:
        # A group's processes share one batch (loader.py), so the group's size does not count: the
        # batches the committed step trained across the groups do (the schedule follows the data).
        return self.runtime.batches_stepped

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        if self.sharding is not None:
            return self.sharding.no_sync(model)
        no_sync = getattr(model, "no_sync", None)
        return no_sync() if callable(no_sync) else contextlib.nullcontext()

    def transform_batches(self, dataloader: Any) -> Any:
        from accelerate.backends.fault_tolerance.loader import CommittedBatchLoader

        state = getattr(dataloader, "gradient_state", None)
        accumulation = int(getattr(state, "num_steps", 1) or 1)
        return CommittedBatchLoader(dataloader, self.runtime, device=self.device, accumulation=accumulation)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, step: Callable[[], Any]) -> Any:
        return self.runtime.optimizer_step(optimizer, step)

    @property
    def step_was_skipped(self) -> bool:
        return self.runtime.step_was_skipped

    def release(self) -> None:
        if self.sharding is not None:
            self.sharding.release()
        self.runtime.shutdown()

    # -- FSDP2 inside the group: what the sharding strategy answers ----------------------------------
    def data_parallel_ranks(self, process_index: int) -> tuple[int, int]:
        if self.sharding is not None:
            return self.sharding.data_parallel_ranks(process_index)
        return super().data_parallel_ranks(process_index)

    def checkpoint_io(self, run: Any = None) -> Any:
        return self.sharding.checkpoint_io(run) if self.sharding is not None else super().checkpoint_io(run)

    def sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        if self.sharding is not None:
            return self.sharding.sync_in_backward(model)
        return super().sync_in_backward(model)

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        if self.sharding is None:
            return super().clip_grad_norm_(parameters, max_norm, norm_type)
        self.runtime.exchange_shards()  # the norm of the gradients averaged across the groups
        return self.sharding.clip_grad_norm_(parameters, max_norm, norm_type)


def fault_tolerant(
    strategy: Strategy, settings: FaultToleranceKwargs, num_processes: int, process_index: int = 0
) -> Strategy:
    """``strategy``'s run as one replica group of a fault-tolerant run (called by the connector).

    The launch's ``num_processes`` processes are the group (``process_index`` this one). DDP groups
    may differ in size (their rank 0 speaks for them, ``group.py``); FSDP2/HSDP groups must all have
    the same size and mesh (each process pairs with the same-rank process of the other groups).
    """
    from accelerate.backends.fsdp.strategy import FSDPStrategy

    # FSDP2 sharding inside each group: its own FSDPStrategy, or HSDP from a ParallelismConfig of
    # data-parallel dimensions only (dp_replicate x dp_shard: FSDP2 on a 2-D mesh, whose
    # optimizer_step override only reduces expert-parallel gradients, which it has none of).
    # Anything else data-parallel runs DDP inside the group.
    hsdp = _is_hsdp(strategy)
    sharding = strategy if type(strategy) is FSDPStrategy or hsdp else None
    if sharding is None and strategy.composes_parallelism:
        raise ValueError(
            f"FaultToleranceKwargs cannot combine with the {strategy.name} strategy's parallelism mesh; "
            "inside a replica group use DDP, FSDP2 (--use_fsdp --fsdp_version 2) or HSDP "
            "(ParallelismConfig(dp_replicate_size=R, dp_shard_size=S) and no other dimension)."
        )
    if not hsdp and (type(strategy).optimizer_step is not Strategy.optimizer_step or strategy.owns_backward):
        raise ValueError(
            f"FaultToleranceKwargs cannot combine with the {strategy.name} strategy, which runs the optimizer "
            "step itself; use plain data parallelism inside each replica group."
        )
    made = FaultTolerantStrategy(
        strategy.device, settings, strategy.distributed_type, group_rank=process_index, group_size=num_processes,
        sharding=sharding,
    )  # fmt: skip
    if isinstance(sharding, FSDPStrategy):
        shape, names = sharding.mesh_shape()
        mesh = " x ".join(f"{name}={size}" for name, size in zip(names, shape))
        made.runtime.layout = f"FSDP2 over {num_processes} processes, mesh {mesh}"
    return made


def _is_hsdp(strategy: Strategy) -> bool:
    """A ParallelismConfig strategy of dp_shard (and dp_replicate) alone: FSDP2/HSDP inside the group."""
    config = getattr(strategy, "config", None)
    if not strategy.composes_parallelism or config is None or not getattr(strategy, "shards", False):
        return False
    others = ("tp_enabled", "cp_enabled", "sp_enabled", "pp_enabled", "ep_enabled")
    return bool(config.dp_shard_enabled) and not any(getattr(config, name, False) for name in others)
