"""The Accelerator's checkpoint methods: save/load of the whole training state, model files, hooks.

Mixed into :class:`~accelerate.accelerator.Accelerator`; the work is done in
:mod:`accelerate.checkpointing.accelerator_io` (the training state) and
:mod:`accelerate.checkpointing.model_access` (a model's weights), which these methods hand the
prepared objects to.
Those modules (and :mod:`accelerate.checkpointing.membership`) are imported by the methods that use them,
not here: ``from accelerate import Accelerator`` and ``Accelerator()`` save nothing, so they do not
pay for the checkpoint code (``tests/bench/test_import_guard.py`` keeps it that way).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from accelerate.backends.base import Strategy
    from accelerate.checkpointing.accelerator_io import TrainingObjects
    from accelerate.checkpointing.membership import ProgressRecord
    from accelerate.checkpointing.model_access import ModelAccess
    from accelerate.optimizer import AcceleratedOptimizer
    from accelerate.precision.amp import Precision
    from accelerate.scheduler import AcceleratedScheduler
    from accelerate.state import AcceleratorState, GradientState, PartialState
    from accelerate.utils.dataclasses import ProjectConfiguration


class AcceleratorCheckpoints:
    """Mixed into `Accelerator`: ``save_state`` / ``load_state``, ``save_model``, ``get_state_dict``, ..."""

    partial_state: PartialState
    state: AcceleratorState
    precision: Precision
    strategy: Strategy
    gradient_state: GradientState
    project_configuration: ProjectConfiguration
    _models: list[torch.nn.Module]
    _optimizers: list[AcceleratedOptimizer]
    _schedulers: list[AcceleratedScheduler]
    _dataloaders: list[Any]
    _custom_objects: list[Any]
    _save_model_state_pre_hook: dict[int, Callable[..., Any]]
    _load_model_state_pre_hook: dict[int, Callable[..., Any]]
    unwrap_model: Callable[..., torch.nn.Module]

    def _progress_record(self) -> ProgressRecord:
        """This Accelerator's checkpoints folder for the progress record of an abnormal end (made on first use)."""
        from accelerate.checkpointing import membership

        record: ProgressRecord | None = self.__dict__.get("_accelerate_progress_record")
        if record is None:
            record = self.__dict__["_accelerate_progress_record"] = membership.ProgressRecord()
        return record

    def save(self, obj: Any, f: Any, safe_serialization: bool = False) -> None:
        """Saves ``obj`` on the main process only (``torch.save`` or safetensors)."""
        from accelerate.checkpointing import model_access

        model_access.save_object(self._model_access(), obj, f, safe_serialization=safe_serialization)

    def save_model(
        self,
        model: torch.nn.Module,
        save_directory: str,
        max_shard_size: int | str = "10GB",
        safe_serialization: bool = True,
    ) -> None:
        from accelerate.checkpointing import model_access

        model_access.save_model(
            self._model_access(),
            model,
            save_directory,
            max_shard_size=max_shard_size,
            safe_serialization=safe_serialization,
        )

    def get_state_dict(self, model: torch.nn.Module, unwrap: bool = True) -> dict[str, torch.Tensor]:
        from accelerate.checkpointing import model_access

        return model_access.get_state_dict(self._model_access(), model, unwrap=unwrap)

    def register_for_checkpointing(self, *objects: Any) -> None:
        from accelerate.checkpointing import accelerator_io as checkpoint_io

        checkpoint_io.check_checkpointable_objects(objects)
        self._custom_objects.extend(objects)

    def register_save_state_pre_hook(self, hook: Callable[..., Any]) -> Any:
        from accelerate.checkpointing import accelerator_io as checkpoint_io

        return checkpoint_io.register_hook(self._save_model_state_pre_hook, hook)

    def register_load_state_pre_hook(self, hook: Callable[..., Any]) -> Any:
        from accelerate.checkpointing import accelerator_io as checkpoint_io

        return checkpoint_io.register_hook(self._load_model_state_pre_hook, hook)

    def _model_access(self) -> ModelAccess:
        from accelerate.checkpointing.model_access import ModelAccess

        return ModelAccess(
            state=self.partial_state,
            save_on_each_node=self.project_configuration.save_on_each_node,
            unwrap=self.unwrap_model,
            full_state_dict=self.strategy.full_state_dict,
            model_state_dict=self.strategy.model_state_dict,
            checkpoint_io=functools.partial(self.strategy.checkpoint_io, self.state),
        )

    def _training_objects(self) -> TrainingObjects:
        from accelerate.checkpointing.accelerator_io import TrainingObjects

        return TrainingObjects(
            state=self.partial_state,
            project=self.project_configuration,
            step=self.gradient_state.micro_step,
            models=list(self._models),
            optimizers=list(self._optimizers),
            schedulers=list(self._schedulers),
            dataloaders=list(self._dataloaders),
            scaler=self.precision.scaler,
            custom_objects=list(self._custom_objects),
            save_hooks=list(self._save_model_state_pre_hook.values()),
            load_hooks=list(self._load_model_state_pre_hook.values()),
            unwrap=self.unwrap_model,
            in_accumulation_window=self.gradient_state.num_steps > 1
            and not self.gradient_state.sync_gradients,
            io=self.strategy.checkpoint_io(self.state),
        )

    def save_state(
        self,
        output_dir: str | None = None,
        safe_serialization: bool = True,
        *,
        async_save: bool = False,
        **save_model_func_kwargs: Any,
    ) -> str:
        """Saves every prepared object, RNG states and registered objects into one checkpoint folder.

        With ``async_save=True`` it returns once the state is copied to host memory; a background
        thread writes and commits the folder. The next ``save_state``, ``load_state``,
        ``end_training`` or exit waits for it and raises its error, if any.
        """
        from accelerate.checkpointing import accelerator_io as checkpoint_io

        saved = checkpoint_io.save_state(
            self._training_objects(),
            output_dir,
            safe_serialization=safe_serialization,
            async_save=async_save,
            **save_model_func_kwargs,
        )
        if saved.next_iteration is not None:
            self.project_configuration.iteration = saved.next_iteration
        self._progress_record().note_checkpoint(saved.path)
        return str(saved.path)

    def load_state(
        self,
        input_dir: str | None = None,
        load_kwargs: dict[str, Any] | None = None,
        *,
        strict: bool = True,
        missing_ok: bool = False,
        **load_model_func_kwargs: Any,
    ) -> str | None:
        """Restores a ``save_state`` folder; returns its path, or None (``missing_ok``) when there is none.

        ``missing_ok=True`` with automatic checkpoint naming resumes from the newest committed
        checkpoint, or starts fresh when there is none yet: one script for the first start and
        every restart (``accelerate launch --max_restarts N``). ``map_location`` (None, ``"cpu"``,
        ``"on_device"``) and ``load_kwargs`` (``{"weights_only": True}``) are upstream's and checked;
        the state is always read onto the CPU and copied to where each object lives.
        """
        from accelerate.checkpointing import accelerator_io as checkpoint_io

        loaded = checkpoint_io.load_state(
            self._training_objects(),
            input_dir,
            strict=strict,
            missing_ok=missing_ok,
            load_kwargs=load_kwargs,
            **load_model_func_kwargs,
        )
        if loaded is None:
            checkpoint_io.continue_numbering(self.project_configuration)
            return None
        self.gradient_state.micro_step = int(loaded.step)
        if loaded.next_iteration is not None:
            self.project_configuration.iteration = loaded.next_iteration
        # A re-formed (elastic or restarted) group says what it resumed from, once, on process 0.
        self._progress_record().report_resume(
            loaded.path,
            loaded.saved_world_size,
            self.partial_state.num_processes,
            self.partial_state.is_main_process,
        )
        return str(loaded.path)
