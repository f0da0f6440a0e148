"""What ``save_state`` / ``load_state`` ask of the strategy: its checkpoint I/O.

``Strategy.checkpoint_io()`` returns a :class:`CheckpointIO`, so this package never asks which
backend runs. The base class is plain files, what the checkpointing modules write themselves: the
main process writes ``model.safetensors`` / ``optimizer.bin`` / ... from full state dicts, and loading
reads them back. A backend overrides only what it changes, at one of two grains:

* **parts** (sharded models): :meth:`CheckpointIO.plan_save` names the models and optimizers the
  backend writes itself, on every process (:class:`SaveParts`), and the per-model / per-optimizer load
  hooks read them back (and the layouts of other runs: a sharded checkpoint into a plain model).
* **owned objects** (engines that checkpoint themselves): with ``owns_training_objects`` the backend's
  own checkpoint holds every model, optimizer and the schedulers it steps
  (:meth:`save_owned` / :meth:`load_owned`); save_state then writes only the rest.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from torch import nn

    from accelerate.storage.durable_io import FileRecord, SyncGroup
    from accelerate.storage.errors import CheckpointError
    from accelerate.storage.manifest import Manifest


class SaveParts(Protocol):
    """The models and optimizers a backend writes itself into a checkpoint, on every process."""

    @property
    def models(self) -> Collection[int]:
        """Indices of the models (in the Accelerator's order) that are not written as plain files."""
        ...

    @property
    def optimizers(self) -> Collection[int]:
        """Indices of the optimizers that are not written as plain files."""
        ...

    def write(self, staging: Path, *, is_main_process: bool, sync: SyncGroup) -> dict[str, FileRecord]:
        """This process's files (a collective: called on every process); their records by name."""
        ...

    def manifest_extra(self) -> dict[str, Any]:
        """Entries for the manifest's ``extra`` (read back by the same backend)."""
        ...

    def node_error(self, node: int) -> CheckpointError | None:
        """Why this process's node cannot take part in the save (``save_on_each_node``), or None."""
        ...


class CheckpointIO:
    """Plain files (the default): every hook below leaves the work to the checkpointing modules."""

    # What the backend checkpoints, for messages ("... does not support {what} yet").
    what = "plain files"
    # True when the backend's own checkpoint holds the models, optimizers and the schedulers it steps.
    owns_training_objects = False

    # --- saving -------------------------------------------------------------------------------------
    def plan_save(self, models: Sequence[nn.Module], optimizers: Sequence[Any]) -> SaveParts | None:
        """The parts this backend writes itself for ``models`` (unwrapped) and ``optimizers``; None: none."""
        return None

    def save_owned(self, staging: Path, writer: bool) -> dict[str, FileRecord]:
        """With ``owns_training_objects``: writes the backend's checkpoint into ``staging`` on every
        process, after the process's own files; the writer returns the records of every file."""
        return {}

    def manifest_extra(self) -> dict[str, Any]:
        """Entries for the manifest's ``extra`` with ``owns_training_objects``."""
        return {}

    # --- loading ------------------------------------------------------------------------------------
    def load_owned(self, directory: Path, manifest: Manifest | None) -> None:
        """With ``owns_training_objects``: loads the backend's checkpoint (before everything else)."""

    # The predicates below let load_state check everything before anything changes (all or
    # nothing): they say which hook will take an object, without reading or loading it.
    def has_model(self, reader: Any, index: int) -> bool:
        """True when model ``index`` is in a layout of this backend (then :meth:`load_model` takes it)."""
        return False

    def holds_full_model(self, model: nn.Module) -> bool:
        """True when :meth:`load_full_model` takes ``model`` (a full state dict needs converting)."""
        return False

    def holds_full_optimizer(self, optimizer: Any, models: Sequence[nn.Module]) -> bool:
        """True when a plain optimizer file goes through :meth:`load_full_optimizer` for ``optimizer``."""
        return False

    def load_model(
        self, reader: Any, index: int, model: nn.Module, *, strict: bool, rank: int, world_size: int
    ) -> bool:
        """Loads model ``index`` from a layout this backend wrote; False: the plain files hold it."""
        return False

    def load_full_model(self, model: nn.Module, state_dict: Mapping[str, Any], *, strict: bool) -> bool:
        """Loads a full state dict (from the plain files) into a model this backend holds differently;
        False: ``model.load_state_dict`` does."""
        return False

    def has_optimizer(self, reader: Any, index: int) -> bool:
        """True when optimizer ``index`` is in a layout of this backend rather than a plain file."""
        return False

    def load_optimizer(
        self,
        reader: Any,
        index: int,
        optimizer: Any,
        models: Sequence[nn.Module],
        *,
        rank: int,
        world_size: int,
    ) -> None:
        """Loads optimizer ``index`` from this backend's layout (only called when :meth:`has_optimizer`)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no optimizer layout of its own")

    def load_full_optimizer(
        self, optimizer: Any, models: Sequence[nn.Module], state: Mapping[str, Any]
    ) -> bool:
        """Loads a plain optimizer file's state where this backend must convert it; False: the
        optimizer's own ``load_state_dict`` does."""
        return False

    # --- what a file holds ---------------------------------------------------------------------------
    def host_copy(self, obj: Any) -> Any:
        """``obj`` as a file may hold it, loadable on a machine without this backend's devices.

        Called on every state dict and object state before it is written (``save_state``,
        ``save_model``, ``Accelerator.save``). Plain files: ``obj`` as it is.
        """
        return obj

    # --- whole state dicts --------------------------------------------------------------------------
    def full_state_dict(self, model: nn.Module) -> dict[str, Any]:
        """The model's whole state dict (a backend may gather it onto the main process)."""
        return model.state_dict()
