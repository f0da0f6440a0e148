"""DeepSpeed ZeRO (stages 0-3) as a Strategy: ``prepare`` builds one engine from the model, the
optimizer and the scheduler together, and the user's loop maps onto it unchanged.

``accelerator.backward(loss)`` runs ``engine.backward`` and, on the last micro-step of an
accumulation window, ``engine.step()`` (see :class:`~accelerate.backends.deepspeed.wrappers.DeepSpeedEngineWrapper`);
``optimizer.step()``/``zero_grad()``/``scheduler.step()`` are then no-ops on the wrappers. Runs on
CPU processes too (DeepSpeed's CPU accelerator over gloo).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from accelerate.backends.base import JointPreparation, Strategy
from accelerate.backends.deepspeed.plugin import DeepSpeedPlugin
from accelerate.backends.deepspeed.runtime import is_engine
from accelerate.backends.deepspeed.setup import (
    PrepareFacts,
    build_engine,
    check_optimizer_source,
    complete_config,
)
from accelerate.backends.deepspeed.wrappers import (
    DeepSpeedEngineWrapper,
    DeepSpeedOptimizerWrapper,
    DeepSpeedSchedulerWrapper,
    DummyOptim,
    DummyScheduler,
    map_pytorch_optim_to_deepspeed,
)
from accelerate.state.distributed_type import DistributedType

if TYPE_CHECKING:
    from accelerate.backends.base import PrepareContext


class DeepSpeedStrategy(Strategy):
    name = "deepspeed"
    prepares_jointly = True
    owns_backward = True

    def __init__(self, device: torch.device, plugins: Mapping[str, DeepSpeedPlugin]) -> None:
        super().__init__(device, DistributedType.DEEPSPEED)
        self.plugins = dict(plugins)
        self.engines: list[Any] = []
        self.engine_wrapper: DeepSpeedEngineWrapper | None = None

    @property
    def plugin(self) -> DeepSpeedPlugin:
        return next(p for p in self.plugins.values() if p.selected)

    # --- prepare -------------------------------------------------------------------------------------
    def prepare_jointly(
        self, objects: list[Any], placements: list[bool | None], context: PrepareContext
    ) -> JointPreparation:
        """Dataloaders first (their batch size fills the config), then one engine for model+optimizer+scheduler.

        Without a dataloader in this call, the ones prepared earlier (``context.prepared``) give the
        batch size; a scheduler wrapper follows the optimizers prepared earlier and in this call.
        """
        from accelerate.backends.registry import object_kind

        kinds = [
            "optimizer"
            if isinstance(o, DummyOptim)
            else "scheduler"
            if isinstance(o, DummyScheduler)
            else object_kind(o)
            for o in objects
        ]
        results = list(objects)
        for i, obj in enumerate(objects):
            if kinds[i] == "dataloader":
                results[i] = context.prepare_data_loader(obj, placements[i])
        models = [i for i, k in enumerate(kinds) if k == "model"]
        optimizers = [i for i, k in enumerate(kinds) if k == "optimizer"]
        schedulers = [i for i, k in enumerate(kinds) if k == "scheduler"]
        if len(models) > 1 or len(optimizers) > 1 or len(schedulers) > 1:
            raise ValueError(
                "Under DeepSpeed, prepare() takes one model with at most one optimizer and one scheduler per call "
                f"(got {len(models)} models, {len(optimizers)} optimizers, {len(schedulers)} schedulers). For a second "
                "model (a teacher, ...), call prepare() again, with its own DeepSpeedPlugin selected if it needs one."
            )
        if (optimizers or schedulers) and not models:
            raise ValueError(
                "Under DeepSpeed, prepare() builds one engine from the model and its optimizer together: pass the "
                "model in the same prepare() call as its optimizer/scheduler."
            )
        if not models:
            return JointPreparation(results)
        model = objects[models[0]]
        optimizer = objects[optimizers[0]] if optimizers else None
        scheduler = objects[schedulers[0]] if schedulers else None
        prepared = context.prepared
        loaders = [results[i] for i, k in enumerate(kinds) if k == "dataloader"] or list(prepared.dataloaders)
        engine = self._build(context, model, optimizer, scheduler, loaders)
        results[models[0]] = engine.engine
        joint = JointPreparation(results, models=[engine.engine])
        if optimizers:
            wrapped = DeepSpeedOptimizerWrapper(engine.optimizer)
            joint.optimizers.append(wrapped)
            results[optimizers[0]] = wrapped
        if schedulers:
            sched = DeepSpeedSchedulerWrapper(engine.scheduler, [*prepared.optimizers, *joint.optimizers])
            joint.schedulers.append(sched)
            results[schedulers[0]] = sched
        return joint

    def _build(
        self,
        context: PrepareContext,
        model: torch.nn.Module,
        optimizer: Any,
        scheduler: Any,
        loaders: list[Any],
    ) -> Any:
        plugin = self.plugin
        check_optimizer_source(plugin.deepspeed_config, optimizer, scheduler)
        batch = _micro_batch_size(loaders, context.num_processes, split_batches=context.split_batches)
        facts = PrepareFacts(
            micro_batch_size=batch,
            gradient_accumulation_steps=context.gradient_accumulation_steps,
            num_processes=context.num_processes,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
        )
        config = complete_config(plugin.deepspeed_config, facts)
        context.precision.check_model(model)
        context.precision.wrap_forward(model)
        plugin.set_moe_leaf_modules(model)
        if optimizer is not None and not isinstance(optimizer, DummyOptim) and _offloads_optimizer(config):
            optimizer = map_pytorch_optim_to_deepspeed(optimizer)
        built = build_engine(config, model, optimizer, scheduler)
        compile_engine(built.engine, context.dynamo_plugin)
        self.engines.append(built.engine)
        if optimizer is not None:
            self.engine_wrapper = DeepSpeedEngineWrapper(built.engine)
        return built

    # --- the training step -------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, *, sync_gradients: bool, **kwargs: Any) -> None:
        if self.engine_wrapper is None:
            raise RuntimeError(
                "accelerator.backward() under DeepSpeed needs a model prepared together with its optimizer: "
                "accelerator.prepare(model, optimizer, ...)."
            )
        self.engine_wrapper.backward(loss, sync_gradients=sync_gradients, **kwargs)

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.module if is_engine(model) else model  # type: ignore[return-value]

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        # DeepSpeed reduces at the accumulation boundary it is told about in backward (no no_sync).
        return contextlib.nullcontext()

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """DeepSpeed clipped inside its step (``gradient_clipping``); returns the norm it measured."""
        if self.engine_wrapper is None:
            return super().clip_grad_norm_(parameters, max_norm, norm_type)
        configured = float(self.engine_wrapper.engine.gradient_clipping() or 0.0)
        if configured != float(max_norm) or float(norm_type) != 2.0:
            raise ValueError(
                f"accelerator.clip_grad_norm_(max_norm={max_norm}, norm_type={norm_type}): under DeepSpeed the engine "
                f"clips inside its step with the config's gradient_clipping={configured} (L2 norm). Set "
                f"DeepSpeedPlugin(gradient_clipping={max_norm}) (or --gradient_clipping {max_norm}, or "
                f'"gradient_clipping": {max_norm} in the JSON) so the two agree.'
            )
        norm = self.engine_wrapper.get_global_grad_norm()
        return torch.tensor(float("nan") if norm is None else norm)

    def clip_grad_value_(self, parameters: Iterable[torch.Tensor], clip_value: float) -> None:
        raise NotImplementedError(
            "accelerator.clip_grad_value_ is not supported under DeepSpeed (it clips by norm, inside its step); "
            "use clip_grad_norm_ with DeepSpeedPlugin(gradient_clipping=...)."
        )

    def release(self) -> None:
        # Otherwise a later save_state would also write the engines of a previous prepare() (say, of
        # a batch-size search's failed attempt), and backward would still drive the old one.
        self.engines.clear()
        self.engine_wrapper = None

    def checkpoint_io(self, run: Any = None) -> Any:
        """The engines' own checkpoints once there are engines; before that, the default I/O."""
        if not self.engines:
            return super().checkpoint_io(run)
        from accelerate.backends.deepspeed.checkpoint_io import EngineCheckpointIO

        return EngineCheckpointIO(self.engines)

    # --- weights -------------------------------------------------------------------------------------
    def full_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
        """The whole model's weights (ZeRO-3 gathers them; main process only there), or None if not an engine."""
        if not is_engine(model):
            return None
        if model.zero_optimization_partition_weights():  # type: ignore[operator]
            if not model.zero_gather_16bit_weights_on_model_save():  # type: ignore[operator]
                raise ValueError(
                    "Cannot gather the ZeRO-3 partitioned weights: stage3_gather_16bit_weights_on_model_save is false "
                    "in the DeepSpeed config. Set DeepSpeedPlugin(zero3_save_16bit_model=True) (or "
                    "--zero3_save_16bit_model true), or save with accelerator.save_state() and convert with "
                    "DeepSpeed's zero_to_fp32.py."
                )
            state: dict[str, torch.Tensor] = model._zero3_consolidated_16bit_state_dict()  # type: ignore[operator]
            return state
        return self.unwrap(model).state_dict()


def _offloads_optimizer(config: dict[str, Any]) -> bool:
    device = (config.get("zero_optimization", {}).get("offload_optimizer") or {}).get("device")
    return device in ("cpu", "nvme")


def _micro_batch_size(loaders: list[Any], num_processes: int, *, split_batches: bool) -> int | None:
    """The per-process batch size of the prepared dataloaders (None without one)."""
    for loader in loaders:
        size = getattr(loader, "total_batch_size", None)
        if size is not None:
            return int(size) // num_processes
        size = getattr(loader, "batch_size", None)
        if size is None and getattr(loader, "batch_sampler", None) is not None:
            size = getattr(loader.batch_sampler, "batch_size", None)
        if size is not None:
            return int(size) // (num_processes if split_batches else 1)
    return None


def compile_engine(engine: Any, plugin: Any) -> None:
    """``torch.compile`` under DeepSpeed, as upstream: the engine compiles itself (``engine.compile``),
    or with regional compilation each repeated block of ``engine.module`` compiles in place
    (``compile_regions_deepspeed``), so ZeRO-3's hooks on the blocks keep firing."""
    if plugin is None or not plugin.enabled:
        return
    kwargs = plugin.to_kwargs()
    if plugin.use_regional_compilation:
        from accelerate.utils.regional_compilation import compile_regions_deepspeed

        compile_regions_deepspeed(engine.module, **kwargs)
    else:
        backend = kwargs.pop("backend")
        engine.compile(backend=backend, compile_kwargs=kwargs)
