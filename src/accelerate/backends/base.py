"""`Strategy`: what a distributed backend does to a model, the hooks the Accelerator calls, and what
`Strategy.prepare_jointly` is given (`PrepareContext`) and returns (`JointPreparation`)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from accelerate.backends.registry import Prepared
from accelerate.state.distributed_type import DistributedType

if TYPE_CHECKING:  # annotations only: Accelerator() loads no checkpoint code until it saves or loads
    from accelerate.checkpointing.checkpoint_io import CheckpointIO
    from accelerate.config.dynamo import TorchDynamoPlugin
    from accelerate.precision.amp import Precision


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrepareContext:
    """What ``Strategy.prepare_jointly`` reads of the run, as values, built by each ``prepare()`` call.

    DeepSpeed builds one engine from the model, the optimizer and the scheduler: it needs the batch
    size of the prepared data loaders, the accumulation steps, the precision's model checks, the
    compile settings and a way to prepare the data loaders of the same call. Handed this context, a
    strategy never sees the Accelerator and can be tested with a context built by hand.

    Example:
        >>> context = PrepareContext(
        ...     num_processes=2, split_batches=False, gradient_accumulation_steps=1, precision=precision,
        ...     dynamo_plugin=None, prepare_data_loader=lambda loader, placement: loader,
        ... )
    """

    num_processes: int
    # Whether a loader's batch is split over the processes (else each process reads a whole batch).
    split_batches: bool
    gradient_accumulation_steps: int
    # The model checks and forward wrapper a strategy applies before it builds its own wrapper.
    precision: Precision
    dynamo_plugin: TorchDynamoPlugin | None
    # ``prepare_data_loader(loader, device_placement)``: the facade's, which records the loader.
    prepare_data_loader: Callable[[Any, bool | None], Any]
    # What earlier prepare() calls made (read only: the facade alone writes it).
    prepared: Prepared = dataclasses.field(default_factory=Prepared)


@dataclasses.dataclass
class JointPreparation:
    """What ``Strategy.prepare_jointly`` made: the results in the caller's order, plus the prepared model,
    optimizer and scheduler objects, which the Accelerator registers itself (it alone writes its lists)."""

    results: list[Any]
    models: list[Any] = dataclasses.field(default_factory=list)
    optimizers: list[Any] = dataclasses.field(default_factory=list)
    schedulers: list[Any] = dataclasses.field(default_factory=list)


# One shared instance: nullcontext keeps no state, and the hot path then allocates nothing.
_NO_SCOPE: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()


class Strategy:
    """Base strategy: one process, one device. Subclasses override what their backend changes."""

    name = "single_device"
    # DeepSpeed-like backends whose engine runs backward and the step itself (see backward()).
    owns_backward = False
    # Backends that build one object from the model, optimizer and scheduler (see preparation.py).
    prepares_jointly = False
    # Regional compilation (TorchDynamoPlugin(use_regional_compilation=True)) runs before setup_module
    # as a compiled copy that the wrapper then wraps; backends whose hooks sit on the blocks themselves
    # (FSDP2's all-gathers, DeepSpeed's ZeRO-3 fetches) compile the blocks in place after setup instead.
    compiles_regions_in_place = False
    # Strategies that compose a ParallelismConfig's mesh dimensions (tp, cp, dp_shard...): the run's
    # ``composes_parallelism`` fact (Accelerator.is_composable_parallelism_enabled) reads this.
    composes_parallelism = False

    def compile_regions(self, model: torch.nn.Module, compile_kwargs: dict[str, Any]) -> None:
        """Compiles ``model``'s repeated blocks in place, after ``setup_module`` (see above)."""
        from accelerate.utils.regional_compilation import compile_regions_fsdp2

        compile_regions_fsdp2(model, **compile_kwargs)

    def __init__(self, device: torch.device, distributed_type: DistributedType = DistributedType.NO) -> None:
        self.device = device
        self.distributed_type = distributed_type

    def batches_stepped(self, num_processes: int) -> int:
        """The batches the optimizer step just taken trained, each one step of the one-process run.

        With ``split_batches=False`` the schedule advances this many times per optimizer step
        (scheduler.py): here one per process. Fault-tolerant replica groups answer the batches
        their last committed step really trained, which depends on the quorum.
        """
        return num_processes

    def data_parallel_ranks(self, process_index: int) -> tuple[int, int]:
        """Process ``process_index``'s (replica, shard) ranks: each process is a whole replica here."""
        return process_index, 0

    def setup_module(self, model: torch.nn.Module, *, device_placement: bool) -> torch.nn.Module:
        """Moves (and, for distributed backends, wraps) a model; returns what the user trains."""
        if device_placement:
            model = model.to(self.device)
        return model

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The user's own module inside whatever the strategy wrapped around it."""
        return model

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Points an optimizer at what ``setup_module`` made of its parameters (FSDP: the shards)."""

    def setup_scheduler(self, scheduler: Any) -> None:
        """Called with each prepared scheduler (an ``AcceleratedScheduler``); nothing to do here."""

    def model_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The model's full state dict; a sharded (DTensor) model is gathered onto the main process
        (the others get ``{}``) whichever strategy prepared it. A collective in that case."""
        return self.checkpoint_io().full_state_dict(model)

    def backward(self, loss: torch.Tensor, *, sync_gradients: bool, **kwargs: Any) -> None:
        """Only called when ``owns_backward``: backward (and the step at a sync) through the backend."""
        raise NotImplementedError(f"the {self.name} strategy does not run backward itself")

    def prepare_jointly(
        self, objects: list[Any], placements: list[bool | None], context: PrepareContext
    ) -> JointPreparation:
        """Only called when ``prepares_jointly``: prepares ``objects`` together, in the caller's order.

        ``context`` holds the run's values this call needs, the facade's data-loader preparation and
        its registry of what earlier ``prepare`` calls made (``context.prepared``, read only).
        """
        raise NotImplementedError(f"the {self.name} strategy prepares objects one by one")

    def release(self) -> None:
        """Forgets what the strategy keeps of prepared objects (``Accelerator.free_memory``)."""

    def checkpoint_io(self, run: Any = None) -> CheckpointIO:
        """How ``save_state`` / ``load_state`` write and read this strategy's models and optimizers.

        ``run`` is the run's description (``AcceleratorState``), read for its settings. Every strategy
        may hold models with DTensor parameters (sharded by hand with ``fully_shard``) and may load a
        checkpoint a sharded run wrote, so the default is the sharded-model I/O, which leaves every
        plain model and plain file to the plain-file base (:class:`CheckpointIO`). Backends that
        checkpoint their objects themselves return their own (DeepSpeed).
        """
        from accelerate.backends.dtensor_io.checkpoint_io import ShardedCheckpointIO

        return ShardedCheckpointIO.for_run(run)

    def full_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
        """The whole model's weights when the backend must gather them; None: use ``state_dict()``."""
        return None

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """Context in which backward accumulates locally without communicating."""
        return contextlib.nullcontext()

    def sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """Context whose forward+backward all-reduces even inside an outer no_sync block."""
        return contextlib.nullcontext()

    def before_backward(self, loss: torch.Tensor) -> None:
        """Called by ``Accelerator.backward`` just before ``loss`` is backpropagated (DDP's sync_in_backward)."""

    def backward_scope(self) -> contextlib.AbstractContextManager[Any]:
        """Context around ``Accelerator.backward``'s backpropagation (DDP: the hang watchdog's record)."""
        return _NO_SCOPE

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        # Under DDP the gradients are already averaged across ranks, so torch's local norm is global.
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Iterable[torch.Tensor], clip_value: float) -> None:
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    # Whether prepared dataloaders leave batches on the host for wrap_dataloader to move (XLA).
    loader_moves_batches = False

    def transform_batches(self, dataloader: Any) -> Any:
        """The prepared loader with the per-batch transform the backend needs (sets the loader's
        ``batch_transform``; unchanged by default). Runs whether or not batches are placed."""
        return dataloader

    def wrap_dataloader(self, dataloader: Any) -> Any:
        """The prepared loader as the backend feeds it to its device (unchanged by default)."""
        return dataloader

    def optimizer_step(self, optimizer: torch.optim.Optimizer, step: Callable[[], Any]) -> Any:
        """Runs ``step`` (the optimizer's step, through the precision) on a sync step; backends that
        communicate gradients at the step rather than in backward (XLA) do it around it."""
        return step()
