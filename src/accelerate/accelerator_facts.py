"""Read-only facts and rank helpers of the Accelerator, delegated to the process state.

Split out of ``accelerator.py`` so the facade file holds behaviour, not forwarding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from accelerate.state.distributed_type import DistributedType
from accelerate.utils.lomo import is_lomo_optimizer, lomo_backward

if TYPE_CHECKING:
    from accelerate.optimizer import AcceleratedOptimizer
    from accelerate.precision.amp import Precision
    from accelerate.precision.fp8.recipes import FP8BackendType
    from accelerate.state import AcceleratorState, GradientState, PartialState
    from accelerate.state.trigger import ProcessTrigger
    from accelerate.utils.dataclasses import DataLoaderConfiguration, ProjectConfiguration


class AcceleratorFacts:
    """Mixed into `Accelerator`: properties and process helpers that only read or forward."""

    partial_state: PartialState
    state: AcceleratorState
    precision: Precision
    gradient_state: GradientState
    dataloader_config: DataLoaderConfiguration
    project_configuration: ProjectConfiguration
    _optimizers: list[AcceleratedOptimizer]
    _trigger: ProcessTrigger

    # ------------------------------------------------------------------ facts about the run
    @property
    def device(self) -> torch.device:
        return self.state.device  # type: ignore[no-any-return]

    @property
    def distributed_type(self) -> DistributedType:
        return self.state.distributed_type

    @property
    def num_processes(self) -> int:
        return self.state.num_processes  # type: ignore[no-any-return]

    @property
    def process_index(self) -> int:
        return self.state.process_index  # type: ignore[no-any-return]

    @property
    def local_process_index(self) -> int:
        return self.state.local_process_index  # type: ignore[no-any-return]

    @property
    def is_main_process(self) -> bool:
        return self.state.is_main_process  # type: ignore[no-any-return]

    @property
    def is_local_main_process(self) -> bool:
        return self.state.is_local_main_process  # type: ignore[no-any-return]

    @property
    def is_last_process(self) -> bool:
        return self.state.is_last_process  # type: ignore[no-any-return]

    @property
    def use_distributed(self) -> bool:
        return self.state.use_distributed  # type: ignore[no-any-return]

    @property
    def mixed_precision(self) -> str:
        return self.precision.mode

    @property
    def native_amp(self) -> bool:
        return self.precision.enabled

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        return self.precision.scaler

    @property
    def split_batches(self) -> bool:
        return self.dataloader_config.split_batches

    @property
    def even_batches(self) -> bool:
        return self.dataloader_config.even_batches

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self.dataloader_config.even_batches = value

    @property
    def dispatch_batches(self) -> bool | None:
        return self.dataloader_config.dispatch_batches

    @property
    def use_seedable_sampler(self) -> bool:
        return self.dataloader_config.use_seedable_sampler

    @property
    def non_blocking(self) -> bool:
        return self.dataloader_config.non_blocking

    @property
    def project_dir(self) -> str | None:
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        return self.project_configuration.logging_dir

    @property
    def save_iteration(self) -> int:
        return self.project_configuration.iteration

    @property
    def sync_gradients(self) -> bool:
        return self.gradient_state.sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, value: bool) -> None:
        self.gradient_state._set_sync_gradients(value)

    @property
    def gradient_accumulation_steps(self) -> int:
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, value: int) -> None:
        self.gradient_state.num_steps = value

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the last optimizer step was skipped (fp16 overflow)."""
        return any(opt.step_was_skipped for opt in self._optimizers)

    @property
    def use_stateful_dataloader(self) -> bool:
        return self.dataloader_config.use_stateful_dataloader

    @property
    def multi_device(self) -> bool:
        """True when several processes train on accelerator devices (GPUs, XPUs, ...); False for CPU processes."""
        return self.state.run.multi_device

    @property
    def should_save_model(self) -> bool:
        """Whether this process writes model files: always here (every backend this release runs can)."""
        return True

    # ------------------------------------------------------------------ parallelism (the N-D mesh)
    @property
    def torch_device_mesh(self) -> Any:
        """The named N-D device mesh built from ``parallelism_config`` (None without one, or in one process).

        ``torch_device_mesh["tp"]`` is the tensor-parallel group a plan runs on; ``["dp"]``,
        ``["dp_shard_cp"]`` and ``["dp_cp"]`` are the flattened data-parallel sub-meshes.
        """
        return self.state.device_mesh

    @property
    def data_parallel_rank(self) -> int:
        """This process's index among the data-parallel replicas (the mesh's ``dp_replicate``).

        Every process is a whole replica under DDP; FSDP's full sharding makes one replica of all of
        them (0), hybrid sharding one per node.
        """
        return self.state.run.data_parallel_rank

    @property
    def data_parallel_shard_rank(self) -> int:
        """This process's index among the shards of its replica (the mesh's ``dp_shard``).

        Under FSDP every rank holds a shard (full sharding: the process index); without sharding, 0.
        """
        return self.state.run.data_parallel_shard_rank

    @property
    def context_parallel_rank(self) -> int:
        """This process's index in its context-parallel group (the mesh's ``cp``; 0 without it)."""
        return self.state.run.context_parallel_rank

    @property
    def tensor_parallel_rank(self) -> int:
        """This process's index in its tensor-parallel group (the mesh's ``tp``; 0 without it)."""
        return self.state.run.tensor_parallel_rank

    @property
    def pipeline_parallel_rank(self) -> int:
        return 0

    @property
    def is_composable_parallelism_enabled(self) -> bool:
        """Whether the run composes several mesh dimensions through a ParallelismConfig (tp, dp_shard, cp)."""
        return self.state.run.composes_parallelism

    @property
    def is_fsdp2(self) -> bool:
        return bool(self.state.is_fsdp2)  # every FSDP setting runs on FSDP2 here

    @property
    def deepspeed_plugin(self) -> Any:
        """The selected DeepSpeedPlugin (None without DeepSpeed)."""
        return self.state.deepspeed_plugin

    @property
    def flag_tensor(self) -> torch.Tensor | None:
        """The :meth:`set_trigger` flag of this process (None when not set)."""
        return self._trigger.flag_tensor

    # ------------------------------------------------------------------ fp8 (precision/fp8) and LOMO
    # Transformer Engine's fp8 autocast wraps the forward at prepare() here, never later.
    delayed_fp8_autocast = False

    @property
    def fp8_enabled(self) -> bool:
        """Whether this run trains in fp8 (``mixed_precision="fp8"``)."""
        return self.precision.fp8 is not None

    @property
    def fp8_backend(self) -> FP8BackendType:
        """The fp8 library in use: ``AO`` (torchao), ``TE``, ``MSAMP``; ``NO`` without fp8."""
        from accelerate.precision.fp8.recipes import FP8BackendType  # many dataclasses: not at start-up

        fp8 = self.precision.fp8
        return FP8BackendType.NO if fp8 is None else fp8.backend

    @property
    def has_fp8_handler(self) -> bool:
        """Whether the script passed an fp8 recipe in ``kwargs_handlers``."""
        return self.precision.fp8 is not None and self.precision.fp8.given is not None

    def _fp8_recipe(self, handler_property: str) -> Any:
        """The run's fp8 recipe when ``handler_property`` is the one that shows its library's recipe."""
        fp8 = self.precision.fp8
        if fp8 is None:
            return None
        if handler_property == "fp8_recipe_handler":  # upstream's older FP8RecipeKwargs, only when passed
            return fp8.given if type(fp8.given).__name__ == "FP8RecipeKwargs" else None
        return fp8.recipe if fp8.library.handler_property == handler_property else None

    @property
    def fp8_recipe_handler(self) -> Any:
        return self._fp8_recipe("fp8_recipe_handler")

    @property
    def te_recipe_handler(self) -> Any:
        return self._fp8_recipe("te_recipe_handler")

    @property
    def msamp_recipe_handler(self) -> Any:
        return self._fp8_recipe("msamp_recipe_handler")

    @property
    def ao_recipe_handler(self) -> Any:
        return self._fp8_recipe("ao_recipe_handler")

    @property
    def has_lomo_optimizer(self) -> bool:
        """Whether a prepared optimizer is a ``lomo_optim`` Lomo/AdaLomo (its update runs in the backward)."""
        return any(is_lomo_optimizer(opt.optimizer) for opt in self._optimizers)

    def lomo_backward(self, loss: torch.Tensor, learning_rate: float) -> None:
        """Backward pass and parameter update of the prepared LOMO optimizers (no ``optimizer.step()`` after).

        Example:
            >>> optimizer = accelerator.prepare(lomo_optim.Lomo(model, lr=1e-3))
            >>> accelerator.lomo_backward(loss, learning_rate=1e-3)
        """
        lomo_backward(
            [opt.optimizer for opt in self._optimizers], loss, learning_rate, self.gradient_state.num_steps
        )

    # ------------------------------------------------------------------ context / sequence parallel helpers
    def maybe_context_parallel(
        self, buffers: Any = None, buffer_seq_dims: Any = None, no_restore_buffers: Any = None
    ) -> contextlib.AbstractContextManager[None]:
        """Context parallelism's buffer sharding on the ``cp`` mesh (CUDA); without cp the block runs as it is."""
        config = self.state.parallelism_config
        if config is None or not config.cp_enabled:
            return contextlib.nullcontext()
        from accelerate.backends.parallel.context import maybe_context_parallel

        return maybe_context_parallel(config, buffers, buffer_seq_dims, no_restore_buffers)

    def deepspeed_ulysses_dl_adapter(self, dl: Any, model: Any) -> Any:
        """DeepSpeed Ulysses' dataloader adapter: ``dl`` comes back. The native Ulysses
        (``sp_backend="torch"``) slices batches in ``prepare()`` itself, and DeepSpeed's is not available."""
        return dl

    def verify_device_map(self, model: torch.nn.Module) -> bool:
        """True when ``model`` (or a submodule) was dispatched over several devices by a device map."""
        for module in model.modules():
            device_map = getattr(module, "hf_device_map", None)
            if isinstance(device_map, dict) and len(set(device_map.values())) > 1:
                return True
        return False

    # ------------------------------------------------------------------ process helpers
    def wait_for_everyone(self) -> None:
        self.partial_state.wait_for_everyone()

    def print(self, *args: Any, **kwargs: Any) -> None:
        self.partial_state.print(*args, **kwargs)

    def main_process_first(self) -> contextlib.AbstractContextManager[None]:
        return self.partial_state.main_process_first()

    def local_main_process_first(self) -> contextlib.AbstractContextManager[None]:
        return self.partial_state.local_main_process_first()

    def split_between_processes(
        self, inputs: Any, apply_padding: bool = False
    ) -> contextlib.AbstractContextManager[Any]:
        return self.partial_state.split_between_processes(inputs, apply_padding=apply_padding)

    def on_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        return self.partial_state.on_main_process(function)

    def on_local_main_process(self, function: Callable[..., Any] | None = None) -> Any:
        return self.partial_state.on_local_main_process(function)

    def on_last_process(self, function: Callable[..., Any]) -> Callable[..., Any]:
        return self.partial_state.on_last_process(function)

    def on_process(self, function: Callable[..., Any] | None = None, process_index: int | None = None) -> Any:
        return self.partial_state.on_process(function, process_index=process_index)

    def on_local_process(
        self, function: Callable[..., Any] | None = None, local_process_index: int | None = None
    ) -> Any:
        return self.partial_state.on_local_process(function, local_process_index=local_process_index)
