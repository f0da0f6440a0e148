"""`Accelerator`: the facade a training script talks to.

It owns the per-process state, one Strategy (how models are wrapped and synchronised), one
Precision (autocast and loss scaling) and the prepared objects, and delegates to them. Which
backend runs is decided once, in ``accelerate.backends.resolve``; nothing here branches on it.

Imports at the top are what ``Accelerator()`` itself needs; code that only some calls use (data
loaders, quantized models, regional compilation, checkpoints, trackers, ...) is imported inside the
method that uses it, so ``from accelerate import Accelerator`` stays cheap
(``tests/bench/test_import_guard.py`` lists what must stay unloaded).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from accelerate import preparation
from accelerate.accelerator_checkpoints import AcceleratorCheckpoints
from accelerate.accelerator_facts import AcceleratorFacts
from accelerate.backends.base import PrepareContext
from accelerate.backends.registry import Prepared
from accelerate.collectives import operations as collectives
from accelerate.config.dynamo import TorchDynamoPlugin
from accelerate.connector import connect
from accelerate.optimizer import AcceleratedOptimizer
from accelerate.scheduler import AcceleratedScheduler
from accelerate.state.parallelism import ParallelismConfig
from accelerate.state.trigger import ProcessTrigger
from accelerate.utils.dataclasses import (
    AutocastKwargs,
    DataLoaderConfiguration,
    GradientAccumulationPlugin,
    KwargsHandler,
    ProfileKwargs,
    ProjectConfiguration,
)
from accelerate.utils.imports import is_bitsandbytes_multi_backend_available  # noqa: F401 (upstream module path)
from accelerate.utils.memory import release_memory
from accelerate.utils.modeling import extract_model_from_parallel


class Accelerator(AcceleratorCheckpoints, AcceleratorFacts):
    """Runs a raw PyTorch training loop on one device, several processes, in mixed precision.

    Example:
        >>> accelerator = Accelerator(mixed_precision="bf16")
        >>> model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        >>> for x, y in loader:
        ...     optimizer.zero_grad()
        ...     accelerator.backward(loss_fn(model(x), y))
        ...     optimizer.step()
    """

    # Class-level too, as upstream (introspection and mocks see it); set per Accelerator in __init__.
    profile_handler: ProfileKwargs | None = None

    def __init__(
        self,
        device_placement: bool = True,
        split_batches: bool | None = None,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int = 1,
        cpu: bool = False,
        dataloader_config: DataLoaderConfiguration | None = None,
        deepspeed_plugin: Any = None,
        fsdp_plugin: Any = None,
        torch_tp_plugin: Any = None,
        megatron_lm_plugin: Any = None,
        rng_types: Sequence[str] | None = None,
        log_with: Any = None,
        project_dir: str | None = None,
        project_config: ProjectConfiguration | None = None,
        gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
        step_scheduler_with_optimizer: bool = True,
        kwargs_handlers: Sequence[KwargsHandler] | None = None,
        dynamo_backend: str | None = None,
        dynamo_plugin: TorchDynamoPlugin | None = None,
        deepspeed_plugins: Any = None,
        parallelism_config: ParallelismConfig | None = None,
        even_batches: bool | None = None,
        use_seedable_sampler: bool | None = None,
        dispatch_batches: bool | None = None,
    ) -> None:
        setup = connect(
            split_batches=split_batches,
            mixed_precision=mixed_precision,
            gradient_accumulation_steps=gradient_accumulation_steps,
            cpu=cpu,
            dataloader_config=dataloader_config,
            deepspeed_plugin=deepspeed_plugin,
            fsdp_plugin=fsdp_plugin,
            torch_tp_plugin=torch_tp_plugin,
            megatron_lm_plugin=megatron_lm_plugin,
            rng_types=rng_types,
            log_with=log_with,
            project_dir=project_dir,
            project_config=project_config,
            gradient_accumulation_plugin=gradient_accumulation_plugin,
            kwargs_handlers=kwargs_handlers,
            dynamo_backend=dynamo_backend,
            dynamo_plugin=dynamo_plugin,
            deepspeed_plugins=deepspeed_plugins,
            parallelism_config=parallelism_config,
            even_batches=even_batches,
            use_seedable_sampler=use_seedable_sampler,
            dispatch_batches=dispatch_batches,
        )
        self.partial_state = setup.partial_state
        self.state = setup.state
        self.precision = setup.precision
        self.strategy = setup.strategy
        self.gradient_state = setup.gradient_state
        self.dataloader_config = setup.dataloader_config
        self.dynamo_plugin = setup.dynamo_plugin
        self.project_configuration = setup.project_configuration
        self.log_with = setup.log_with
        self.rng_types = setup.rng_types
        self.ddp_handler = setup.ddp_handler
        self.scaler_handler = setup.scaler_handler
        self.autocast_handler = setup.autocast_handler
        self.init_handler = setup.init_handler
        self.profile_handler = setup.profile_handler
        # The run's config as connect() resolved it: the script's, else the launcher's (--use_parallelism_config).
        self.parallelism_config = self.state.parallelism_config
        self._trigger = ProcessTrigger(self.partial_state.device)
        self.device_placement = device_placement
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer

        self.step = 0  # a new Accelerator starts a new accumulation window
        # One registry of the prepared objects, handed to the strategy (Strategy.prepare_jointly);
        # the private lists below are its lists, so every existing reader and writer sees one truth.
        self._prepared = Prepared()
        self._models: list[torch.nn.Module] = self._prepared.models
        self._optimizers: list[AcceleratedOptimizer] = self._prepared.optimizers
        self._schedulers: list[AcceleratedScheduler] = self._prepared.schedulers
        self._dataloaders: list[Any] = self._prepared.dataloaders
        self._custom_objects: list[Any] = []
        self._save_model_state_pre_hook: dict[int, Callable[..., Any]] = {}
        self._load_model_state_pre_hook: dict[int, Callable[..., Any]] = {}
        self.trackers: list[Any] = []

    # ------------------------------------------------------------------ prepare
    def prepare(self, *args: Any, device_placement: Sequence[bool] | None = None) -> Any:
        """Prepares models, optimizers, schedulers and dataloaders for this setup.

        Objects come back in the order given (a single object comes back alone). Other objects
        pass through unchanged.
        """
        placements = preparation.placements_for(len(args), device_placement)
        context = PrepareContext(
            num_processes=self.num_processes, split_batches=self.split_batches, precision=self.precision,
            gradient_accumulation_steps=self.gradient_state.num_steps, dynamo_plugin=self.dynamo_plugin,
            prepare_data_loader=self.prepare_data_loader, prepared=self._prepared,
        )  # fmt: skip
        preparers = preparation.Preparers(
            model=self.prepare_model, optimizer=self.prepare_optimizer,
            scheduler=self.prepare_scheduler, register=self._register_prepared,
        )  # fmt: skip
        result = preparation.prepare_all(list(args), placements, preparers, self.strategy, context)
        return result[0] if len(result) == 1 else tuple(result)

    def prepare_model(
        self, model: torch.nn.Module, device_placement: bool | None = None, evaluation_mode: bool = False
    ) -> torch.nn.Module:
        """Moves the model to the device, applies mixed precision and wraps it for the backend."""
        preparation.check_not_a_class(model, "prepare_model() argument 'model'")
        if any(model is known for known in self._models):
            # Prepared by this Accelerator already: handed back as it is (wrapping it again would stack
            # wrappers), and listed once, as upstream does.
            return model
        model = preparation.setup_model(
            model, place=self.device_placement if device_placement is None else device_placement,
            evaluation_mode=evaluation_mode, dispatched=self.verify_device_map(model),
            num_processes=self.num_processes, device=self.device, sharded=bool(self.state.is_fsdp2),
            strategy=self.strategy, precision=self.precision, dynamo_plugin=self.dynamo_plugin,
        )  # fmt: skip
        self._models.append(model)
        return model

    def prepare_optimizer(
        self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None
    ) -> AcceleratedOptimizer:
        if isinstance(optimizer, AcceleratedOptimizer):
            preparation.track_once(optimizer, self._optimizers)
            return optimizer
        preparation.check_not_a_class(optimizer, "prepare_optimizer() argument 'optimizer'")
        place = self.device_placement if device_placement is None else device_placement
        self.strategy.setup_optimizer(optimizer)  # FSDP: from the full parameters to their shards
        wrapped = AcceleratedOptimizer(
            optimizer,
            device_placement=place,
            precision=self.precision,
            gradient_state=self.gradient_state,
            device=self.device,
            strategy=self.strategy,
        )
        self.precision.register(optimizer)
        self._optimizers.append(wrapped)
        return wrapped

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        if isinstance(scheduler, AcceleratedScheduler) or getattr(
            scheduler, "_is_accelerate_prepared", False
        ):
            preparation.track_once(scheduler, self._schedulers)
            # An AcceleratedScheduler, or an object a backend marked prepared to stand in for one.
            prepared: AcceleratedScheduler = scheduler
            return prepared
        preparation.check_not_a_class(scheduler, "prepare_scheduler() argument 'scheduler'")
        inner = getattr(scheduler, "optimizer", None)
        optimizers = [opt for opt in self._optimizers if opt.optimizer is inner] or list(self._optimizers)
        wrapped = AcceleratedScheduler(
            scheduler,
            optimizers,
            step_with_optimizer=self.step_scheduler_with_optimizer,
            split_batches=self.split_batches,
            num_processes=self.num_processes,
            batches_stepped=self.strategy.batches_stepped,
            gradient_state=self.gradient_state,
        )
        self._schedulers.append(wrapped)
        self.strategy.setup_scheduler(wrapped)  # fault tolerance: its state heals with the weights
        return wrapped

    def _register_prepared(
        self, *, models: Sequence[Any] = (), optimizers: Sequence[Any] = (), schedulers: Sequence[Any] = ()
    ) -> None:
        """Adds objects a strategy prepared together (DeepSpeed's engine) to the ones save/load handle."""
        self._models.extend(models)
        self._optimizers.extend(optimizers)
        self._schedulers.extend(schedulers)

    def prepare_data_loader(
        self,
        data_loader: torch.utils.data.DataLoader[Any],
        device_placement: bool | None = None,
        slice_fn_for_dispatch: Any = None,
    ) -> Any:
        preparation.check_not_a_class(data_loader, "prepare_data_loader() argument 'data_loader'")
        if getattr(data_loader, "_is_accelerate_prepared", False):  # prepared already: never wrapped twice
            preparation.track_once(data_loader, self._dataloaders)
            return data_loader
        prepared = preparation.shard_data_loader(
            data_loader, config=self.dataloader_config, device=self.device, strategy=self.strategy,
            place=self.device_placement if device_placement is None else device_placement,
            data_shards=self.state.run.data_shards, rng_types=self.rng_types,
            gradient_state=self.gradient_state, slice_fn_for_dispatch=slice_fn_for_dispatch,
        )  # fmt: skip
        self._dataloaders.append(prepared)
        return prepared

    def skip_first_batches(self, dataloader: Any, num_batches: int = 0) -> Any:
        from accelerate.data.resume import skip_first_batches

        return skip_first_batches(dataloader, num_batches=num_batches)

    # ------------------------------------------------------------------ the training step
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()`` with loss scaling and division by the accumulation steps.

        ``learning_rate=`` with a prepared LOMO optimizer runs :meth:`lomo_backward` (as transformers'
        Trainer does for ``optim="lomo"``).
        """
        if "learning_rate" in kwargs and self.has_lomo_optimizer:
            self.lomo_backward(loss, kwargs.pop("learning_rate"))
            return
        if self.strategy.owns_backward:  # DeepSpeed: the engine scales, accumulates and steps
            self.strategy.backward(loss, sync_gradients=self.gradient_state.sync_gradients, **kwargs)
            return
        if self.gradient_state.num_steps > 1:
            loss = loss / self.gradient_state.num_steps
        self.strategy.before_backward(loss)
        with self.strategy.backward_scope():
            self.precision.backward(loss, **kwargs)

    @property
    def step(self) -> int:
        """Micro-steps since the last sync (kept by ``GradientState``, saved in checkpoints)."""
        return self.gradient_state.micro_step

    @step.setter
    def step(self, value: int) -> None:
        self.gradient_state.micro_step = int(value)

    def _do_sync(self) -> None:
        self.gradient_state.begin_micro_step()

    def accumulate(self, *models: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """Marks one micro-step: gradients sync (and the optimizer steps) every ``k``-th time.

        On the other micro-steps DDP skips its all-reduce (unless ``sync_each_batch``) and the
        wrapped optimizer's ``step``/``zero_grad`` do nothing. At the end of a prepared dataloader a
        partial accumulation syncs (``sync_with_dataloader``).
        """
        return _MicroStep(self, models)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """Backward inside this block accumulates locally without communicating (DDP)."""
        return self.strategy.no_sync(model)

    def trigger_sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """Forces the backward of this block to all-reduce, even inside ``no_sync``/``accumulate``."""
        return self.strategy.sync_in_backward(model)

    def _unscale_for_clipping(self) -> None:
        if self.precision.scaler is not None and self.gradient_state.sync_gradients:
            for opt in self._optimizers:
                self.precision.unscale(opt.optimizer)

    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = 2) -> torch.Tensor:
        """Clips the (unscaled) gradient norm and returns the total norm before clipping."""
        self._unscale_for_clipping()
        return self.strategy.clip_grad_norm_(_as_list(parameters), max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        self._unscale_for_clipping()
        self.strategy.clip_grad_value_(_as_list(parameters), clip_value)

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Unscales fp16 gradients now (of ``optimizer``, a list of them, or every prepared one), once per step."""
        if optimizer is None:
            optimizers: list[Any] = list(self._optimizers)
        else:
            optimizers = list(optimizer) if isinstance(optimizer, list | tuple) else [optimizer]
        for opt in optimizers:
            self.precision.unscale(opt.optimizer if isinstance(opt, AcceleratedOptimizer) else opt)

    def autocast(
        self, autocast_handler: AutocastKwargs | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """Mixed-precision autocast for code outside the prepared model (a null context without it)."""
        return self.precision.autocast(autocast_handler)

    def profile(self, profile_handler: ProfileKwargs | None = None) -> contextlib.AbstractContextManager[Any]:
        """``torch.profiler`` around the block (settings: the argument, else the Accelerator's ProfileKwargs)."""
        from accelerate.profiling import profile

        return profile(profile_handler or self.profile_handler, self.process_index)

    def join_uneven_inputs(
        self, joinables: Sequence[Any], even_batches: bool | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """Lets processes with fewer batches finish early without hanging the others' DDP all-reduce."""
        from accelerate.backends.join import join_uneven_inputs

        return join_uneven_inputs(
            joinables, dataloaders=self._dataloaders, distributed_type=self.distributed_type,
            even_batches=even_batches, default_even_batches=self.even_batches,
        )  # fmt: skip

    def set_trigger(self) -> None:
        """Raises a flag on this process that :meth:`check_trigger` reports on every process."""
        self._trigger.set()

    def check_trigger(self) -> bool:
        """True on every process if any process called :meth:`set_trigger` since the last check (a collective)."""
        return self._trigger.check()

    # ------------------------------------------------------------------ collectives
    def gather(self, tensor: Any) -> Any:
        return collectives.gather(tensor)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gathers across processes and drops the samples duplicated to even out the last round."""
        from accelerate.data.metrics import gather_for_metrics

        return gather_for_metrics(
            input_data,
            gradient_state=self.gradient_state,
            num_processes=self.num_processes,
            use_gather_object=use_gather_object,
            data_shards=self.state.run.data_shards[0],
        )

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        return collectives.reduce(tensor, reduction=reduction, scale=scale)

    def pad_across_processes(
        self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False
    ) -> Any:
        return collectives.pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)

    # ------------------------------------------------------------------ models and memory
    def unwrap_model(
        self, model: torch.nn.Module, keep_fp32_wrapper: bool = True, keep_torch_compile: bool = True
    ) -> torch.nn.Module:
        """The user's module without DDP/compile wrappers (and without the fp32 wrapper if asked)."""
        return extract_model_from_parallel(
            model, keep_fp32_wrapper=keep_fp32_wrapper, keep_torch_compile=keep_torch_compile
        )

    def free_memory(self, *objects: Any) -> list[None]:
        """Forgets every prepared object, runs the garbage collector and empties the device cache."""
        self._prepared.clear()
        self.precision.forget_optimizers()
        self.strategy.release()
        self.step = 0
        return release_memory(*objects)

    def clear(self, *objects: Any) -> list[None]:
        return self.free_memory(*objects)

    def end_training(self) -> None:
        """Finishes the trackers and tears the process group down."""
        # A background save_state commits (or raises) first. No save without the checkpoint code
        # loaded: a run that never saved does not load it here just to find nothing pending.
        checkpoint_io = sys.modules.get("accelerate.checkpointing.accelerator_io")
        if checkpoint_io is not None:
            checkpoint_io.wait_for_async_save()
            checkpoint_io.end_of_job()
        for tracker in self.trackers:
            tracker.finish()
        self.partial_state.destroy_process_group()

    # ------------------------------------------------------------------ tracking
    def init_trackers(
        self,
        project_name: str,
        config: dict[str, Any] | None = None,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        from accelerate.tracking import start_trackers

        self.trackers = start_trackers(
            self.log_with, project_name, config, init_kwargs or {},
            logging_dir=self.logging_dir, is_main_process=self.is_main_process,
        )  # fmt: skip

    def log(
        self, values: dict[str, Any], step: int | None = None, log_kwargs: dict[str, Any] | None = None
    ) -> None:
        for tracker in self.trackers:  # a process holds only the trackers that run on it (see start_trackers)
            tracker.log(values, step=step, **(log_kwargs or {}).get(tracker.name, {}))

    def get_tracker(self, name: str, unwrap: bool = False) -> Any:
        from accelerate.tracking import find_tracker

        return find_tracker(self.trackers, self.log_with, name, unwrap, is_main_process=self.is_main_process)


def _as_list(parameters: Any) -> list[torch.Tensor]:
    if isinstance(parameters, torch.Tensor):
        return [parameters]
    return list(parameters)


class _MicroStep:
    """The context :meth:`Accelerator.accumulate` returns.

    A class rather than a ``contextlib`` generator because it runs on every micro-step: the
    generator machinery cost a few microseconds a step, which the accumulation benchmarks see. The
    micro-step is counted on entry, as a generator's body would count it.
    """

    __slots__ = ("_accelerator", "_context", "_models")

    def __init__(self, accelerator: Accelerator, models: tuple[torch.nn.Module, ...]) -> None:
        self._accelerator = accelerator
        self._models = models
        self._context: contextlib.AbstractContextManager[Any] | None = None

    def __enter__(self) -> None:
        accelerator = self._accelerator
        accelerator._do_sync()
        state = accelerator.gradient_state
        if state.sync_gradients or state.sync_each_batch or not self._models:
            return  # the common step: nothing to enter, no ExitStack on the hot path
        strategy = accelerator.strategy
        if len(self._models) == 1:  # one model (the common case): its no_sync without an ExitStack
            context = strategy.no_sync(self._models[0])
        else:
            context = contextlib.ExitStack()
            try:
                for model in self._models:
                    context.enter_context(strategy.no_sync(model))
            except BaseException:
                context.close()
                raise
        context.__enter__()
        self._context = context

    def __exit__(self, *exc: Any) -> bool:
        context, self._context = self._context, None
        return bool(context.__exit__(*exc)) if context is not None else False
