"""The Accelerator's ``save_state`` / ``load_state``, delegated here to keep the facade small.

Files are written by ``storage/`` (atomic folders, the project lock) and the sibling modules
(project, training_state); a model's weights alone go through ``model_access.py``. The facade's
delegate hands this module what it needs explicitly (a frozen :class:`TrainingObjects`) and applies what comes back (the step, the next checkpoint number)
itself: this module never writes to the Accelerator.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from accelerate.checkpointing.checkpoint_io import CheckpointIO
from accelerate.checkpointing.internal_reads import internal_state_read

if TYPE_CHECKING:
    from accelerate.checkpointing.training_state import ProcessInfo
    from accelerate.utils.dataclasses import ProjectConfiguration

logger = logging.getLogger(__name__)


class _HookHandle:
    """Returned by register_*_pre_hook; ``remove()`` unregisters the hook."""

    def __init__(self, registry: dict[int, Callable[..., Any]], key: int) -> None:
        self._registry, self._key = registry, key

    def remove(self) -> None:
        self._registry.pop(self._key, None)


def register_hook(registry: dict[int, Callable[..., Any]], hook: Callable[..., Any]) -> _HookHandle:
    if not callable(hook):
        raise TypeError(f"a state pre-hook must be callable, got {type(hook).__name__}")
    key = max(registry, default=-1) + 1
    registry[key] = hook
    return _HookHandle(registry, key)


def check_checkpointable_objects(objects: Sequence[Any]) -> None:
    """Raises for the objects ``register_for_checkpointing`` cannot save (before anything is registered).

    One ``ValueError`` (NotStatefulError) lists every invalid object as upstream does ("Item at index
    0, `Tensor`"), each followed by what it lacks.
    """
    from accelerate.checkpointing.objects import NotStatefulError
    from accelerate.checkpointing.training_state import check_checkpointable
    from accelerate.utils.text import get_pretty_name

    problems = []
    for index, obj in enumerate(objects):
        try:
            check_checkpointable(obj)
        except NotStatefulError as error:
            problems.append(f"\n\t- Item at index {index}, `{get_pretty_name(obj)}`: {error}")
    if problems:
        raise NotStatefulError(
            "All `objects` must include a `state_dict` and `load_state_dict` function to be stored. The "
            "following inputs are invalid:" + "".join(problems)
        )


def _no_extra(call: str, kwargs: dict[str, Any]) -> None:
    if kwargs:
        raise TypeError(f"{call} got unsupported keyword arguments {sorted(kwargs)}")


def _project_dir(project: ProjectConfiguration, given: str | None, call: str) -> str | None:
    """The project folder when automatic naming applies (None when the caller's path is used)."""
    if not project.automatic_checkpoint_naming:
        if given is None:
            raise ValueError(
                f"{call}() needs a folder, or ProjectConfiguration(project_dir=..., "
                "automatic_checkpoint_naming=True) to name checkpoints automatically."
            )
        if given == "":
            raise ValueError(
                f"{call}('') got an empty folder name (an unset variable?); name the checkpoint folder, "
                "e.g. 'checkpoints/step_100' ('.' means the current directory, explicitly)."
            )
        return None
    if given is not None:
        raise ValueError(
            f"{call}({given!r}) conflicts with ProjectConfiguration(automatic_checkpoint_naming=True), "
            "which names checkpoints itself; drop the argument or turn automatic naming off."
        )
    if project.project_dir is None:
        raise ValueError(
            "automatic_checkpoint_naming=True needs a project directory: ProjectConfiguration(project_dir=...)"
        )
    return project.project_dir


@dataclass(frozen=True)
class TrainingObjects:
    """What ``save_state`` / ``load_state`` need from the Accelerator, handed over explicitly."""

    state: ProcessInfo
    project: ProjectConfiguration
    step: int
    models: Sequence[torch.nn.Module]
    optimizers: Sequence[Any]
    schedulers: Sequence[Any]
    dataloaders: Sequence[Any]
    scaler: Any
    custom_objects: Sequence[Any]
    save_hooks: Sequence[Callable[..., Any]]
    load_hooks: Sequence[Callable[..., Any]]
    unwrap: Callable[..., torch.nn.Module]
    # True between the micro-steps of an accumulation window: gradients are held, not yet applied.
    in_accumulation_window: bool = False
    # The strategy's checkpoint I/O (``Strategy.checkpoint_io()``); None: plain files.
    io: CheckpointIO | None = None

    @property
    def checkpoint_io(self) -> CheckpointIO:
        return self.io if self.io is not None else CheckpointIO()

    def stateful(self) -> dict[str, Any]:
        """The keyword arguments save_training_state and load_training_state share."""
        owned = self.checkpoint_io.owns_training_objects  # then the backend's own checkpoint holds these
        return {
            "state": self.state,
            "optimizers": [] if owned else self.optimizers,
            "schedulers": [s for s in self.schedulers if not getattr(s, "owned_by_engine", False)],
            "dataloaders": self.dataloaders,
            "scaler": self.scaler,
            "custom_objects": self.custom_objects,
        }


@dataclass(frozen=True)
class Outcome:
    """What the Accelerator applies after a save or load: the folder, step and next checkpoint number."""

    path: Path
    step: int
    next_iteration: int | None  # None without automatic checkpoint naming
    saved_world_size: int | None = None  # loads only: the processes that wrote it (None: unknown)


def wait_for_async_save() -> None:
    """Waits for a background ``save_state(async_save=True)``; raises its error, naming the folder."""
    if "accelerate.checkpointing.async_save" in sys.modules:  # none can be in flight otherwise
        from accelerate.checkpointing.async_save import wait_for_async_save as wait

        wait()


def end_of_job() -> None:
    """``end_training``: the project folders this process owns are free for another job from here on."""
    from accelerate.storage.project_lock import release_projects

    release_projects()


def save_state(
    objects: TrainingObjects,
    output_dir: str | None,
    *,
    safe_serialization: bool,
    async_save: bool = False,
    **kwargs: Any,
) -> Outcome:
    """Writes every prepared object, the scaler, RNG states and registered objects, atomically.

    With ``async_save`` the state is copied to host memory and written by a background thread
    (see async_save.py); the returned folder is committed later. With automatic naming this job
    owns the project folder from its first save or load there (see project_lock.py).
    """
    if kwargs:
        # Upstream hands these to one engine's own checkpoint-saving call and ignores them elsewhere;
        # no checkpoint writer here takes options, so a script written for that engine still saves.
        logger.warning(
            "save_state ignores %s: upstream passes them to an engine's own checkpoint saving, which "
            "this run does not use.", ", ".join(sorted(kwargs)),
        )  # fmt: skip
    wait_for_async_save()  # one snapshot in flight at most; its error surfaces here
    project = _project_dir(objects.project, output_dir, "save_state")
    if project is not None:
        _own_project(objects, project, "save_state")
    return _save_state(objects, output_dir, safe_serialization=safe_serialization, async_save=async_save)


def _own_project(objects: TrainingObjects, project: str, call: str) -> None:
    """This job takes the project folder (its writing process(es) lock it); every rank learns if refused.

    Once every rank agreed, later saves and loads there skip both exchanges: every rank makes the same
    calls in the same order, so all of them skip alike (until the folders are released).
    """
    from accelerate.storage.project_lock import agreed_on, note_agreed

    if agreed_on(project):
        return
    _take_project(objects, project, call)
    note_agreed(project)


def _take_project(objects: TrainingObjects, project: str, call: str) -> None:
    from accelerate.checkpointing.run_identity import agree_on_run_id, run_id
    from accelerate.checkpointing.training_state import writer_and_node
    from accelerate.collectives.agreement import agree_on_outcome
    from accelerate.storage.project_lock import ProjectBusyError, own_project

    what = f"{call} into {project}"
    agree_on_run_id(what=what)  # process 0's id on every rank: this job's writers know each other
    error: BaseException | None = None
    if writer_and_node(objects.state, objects.project.save_on_each_node)[0]:
        try:
            own_project(project, run_id=run_id())
        except ProjectBusyError as exc:
            error = exc
    agree_on_outcome(error, what=what, error_type=ProjectBusyError)


def _save_state(
    objects: TrainingObjects,
    output_dir: str | None,
    *,
    safe_serialization: bool,
    async_save: bool,
) -> Outcome:
    from accelerate.checkpointing.project import checkpoint_dir
    from accelerate.checkpointing.training_state import save_training_state, writer_and_node

    config = objects.project
    project = _project_dir(config, output_dir, "save_state")
    if project is None:
        target = Path(output_dir)  # type: ignore[arg-type]  # _project_dir checked it is given
    else:
        target = checkpoint_dir(project, config.iteration)
        if target.exists():
            raise FileExistsError(
                f"Checkpoint {target} already exists. Resume with load_state() first (it moves the "
                "iteration past the latest checkpoint), or set ProjectConfiguration(iteration=...)."
            )
        # Checkpoints beyond the limit that a crash between a commit and its rotation left go first,
        # so repeated crashes cannot pile folders up (at most total_limit plus the one being written).
        if config.total_limit is not None and writer_and_node(objects.state, config.save_on_each_node)[0]:
            _rotate(config, project)
    models = list(objects.models)
    io = objects.checkpoint_io
    owned = io.owns_training_objects
    with internal_state_read():  # a pipeline rank's freed stages: the hooks see them empty, as saved
        weights = [
            objects.unwrap(m, keep_fp32_wrapper=True, keep_torch_compile=False).state_dict() for m in models
        ] if not owned else []  # fmt: skip
    bare = [objects.unwrap(m, keep_torch_compile=False) for m in models]  # as upstream: not the DDP wrappers
    for hook in objects.save_hooks:
        hook(bare, weights, str(target))
    unwrapped = [objects.unwrap(m, keep_torch_compile=False) for m in models]
    parts = io.plan_save(unwrapped, objects.optimizers)
    pending = None
    if objects.in_accumulation_window and not owned:
        pending = [
            {
                name: p.grad.detach().cpu()
                for name, p in objects.unwrap(m, keep_torch_compile=False).named_parameters()
                if p.grad is not None
            }
            for m in models
        ]
    next_iteration = config.iteration + 1 if project is not None else None

    save_kwargs: dict[str, Any] = {
        "models_state_dicts": weights,
        "step": objects.step,
        "pending_gradients": pending,
        "safe_serialization": safe_serialization,
        "save_on_each_node": config.save_on_each_node,
        "parts": parts,
        "owned_files": io.save_owned if owned else None,
        "extra_manifest": io.manifest_extra() if owned else None,
        "host_copy": io.host_copy,
        **objects.stateful(),
    }
    if async_save:
        if parts is not None or owned:
            # A backend's own saves (parts or owned objects) run collectives; on the writer thread
            # they could pair with the training loop's collectives and hang.
            raise ValueError(
                f"save_state(async_save=True) does not support {io.what} yet: their save runs "
                "collectives that cannot leave the training thread. Use async_save=False."
            )
        from accelerate.checkpointing.async_save import start_async_save

        # None here (full state dicts only); the snapshot is a host copy already.
        for key in ("parts", "owned_files", "extra_manifest", "host_copy"):
            del save_kwargs[key]

        # Rotation runs on the writer thread, after every writer committed.
        rotate = functools.partial(_rotate, config, project) if project is not None else None
        path = start_async_save(target, after_commit=rotate, **save_kwargs)
        return Outcome(path, objects.step, next_iteration)
    path = save_training_state(target, **save_kwargs)
    state = objects.state
    if project is not None:
        # save_training_state returned, so every rank knows the new one is committed.
        if writer_and_node(state, config.save_on_each_node)[0]:
            _rotate(config, project, path)
        state.wait_for_everyone()  # no rank goes on while old checkpoints are being removed
    # Without rotation no barrier is needed: save_training_state's last exchange already told every
    # rank that the checkpoint is committed.
    return Outcome(path, objects.step, next_iteration)


def _rotate(config: ProjectConfiguration, project: str, keep: Path | None = None) -> None:
    """Removes the oldest checkpoints beyond ``total_limit`` (never ``keep``), on the writing process."""
    from accelerate.checkpointing.project import rotate_checkpoints

    try:
        rotate_checkpoints(project, config.total_limit, keep=keep)
    except OSError as exc:
        # Failing to delete an old checkpoint must not stop training (nor leave the other ranks
        # waiting for this one).
        logger.warning("Could not remove old checkpoints under %s: %s", config.project_dir, exc)


def load_state(
    objects: TrainingObjects,
    input_dir: str | None,
    *,
    strict: bool,
    missing_ok: bool = False,
    map_location: str | None = None,
    load_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Outcome | None:
    """Restores what :func:`save_state` wrote; without a path, the latest committed checkpoint.

    With ``missing_ok``, None when there is nothing to load (see :mod:`~accelerate.checkpointing.resume_point`).
    """
    from accelerate.checkpointing.functional import check_load_options
    from accelerate.checkpointing.resume_point import find_resume_checkpoint, iteration_after
    from accelerate.checkpointing.training_state_load import load_training_state

    check_load_options("load_state", map_location, load_kwargs)
    _no_extra("load_state", kwargs)
    wait_for_async_save()  # the folder to load may be the one still being written
    if objects.project.automatic_checkpoint_naming and input_dir is not None:
        # A folder named explicitly is loaded, as upstream does; the project still numbers the next save.
        project = objects.project.project_dir
        if project is not None:
            _own_project(objects, project, "load_state")
        found = find_resume_checkpoint(None, input_dir, missing_ok=missing_ok)
    else:
        project = _project_dir(objects.project, input_dir, "load_state")
        if project is not None:  # before looking: the newest checkpoint is this job's from here on
            _own_project(objects, project, "load_state")
        found = find_resume_checkpoint(project, input_dir, missing_ok=missing_ok)
    if found is None:
        return None
    source = found
    models = [objects.unwrap(m, keep_torch_compile=False) for m in objects.models]
    for hook in objects.load_hooks:
        hook(models, str(source))
    io = objects.checkpoint_io
    if io.owns_training_objects:  # the backend loads its modules, optimizers and schedulers itself
        from accelerate.storage.atomic import checkpoint_folder, read_manifest

        io.load_owned(checkpoint_folder(source), read_manifest(source))
        models = []
    result = load_training_state(source, models=models, strict=strict, io=io, **objects.stateful())
    next_iteration = None
    if project is not None:
        next_iteration = iteration_after(project, source, objects.project.iteration)
    if project is not None and input_dir is None:  # the newest checkpoint, picked for the caller
        from accelerate.checkpointing.run_identity import note_resumed_run
        from accelerate.storage.atomic import read_manifest

        if objects.state.is_main_process:
            manifest = read_manifest(source)  # loaded just now: it is readable
            note_resumed_run(source, manifest.extra if manifest is not None else None)
    saved_world = result.get("world_size")
    world = int(saved_world) if saved_world is not None else None
    return Outcome(source, int(result["step"]), next_iteration, world)


def continue_numbering(config: ProjectConfiguration) -> None:
    """After ``load_state(missing_ok=True)`` found nothing: the next automatic name must be free."""
    from accelerate.checkpointing.resume_point import iteration_after

    if config.automatic_checkpoint_naming and config.project_dir is not None:
        config.iteration = iteration_after(config.project_dir, None, config.iteration)
