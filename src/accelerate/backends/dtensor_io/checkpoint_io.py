"""The sharded models and their optimizers in ``save_state`` / ``load_state``: DTensor checkpoint I/O.

:class:`ShardedCheckpointIO` is what ``Strategy.checkpoint_io()`` returns (see
:mod:`accelerate.checkpointing.checkpoint_io`): sharded models are told apart by their DTensor
parameters, so it serves a model sharded by hand with ``fully_shard`` as well as one FSDPStrategy
prepared, and it leaves every plain model to the plain files.

Saving (every process takes part; the folder stays atomic because everything lands in the staging
folder and the manifest, listing every process's files, is still written last):

* ``SHARDED_STATE_DICT`` (the default): ``pytorch_model_fsdp_{i}/`` and ``optimizer_{i}/`` are DCP
  folders, one file per process plus ``.metadata``; no process ever holds the whole model.
* ``FULL_STATE_DICT``: the state is gathered onto process 0, which writes ``pytorch_model_fsdp.bin``
  (``_{i}`` from the second model on) and ``optimizer.bin`` keyed by parameter names.

Loading takes whichever of these (or the plain ``model.safetensors`` / ``optimizer.bin`` of an
unsharded run) the folder holds, into a model that is sharded over any number of processes or not
sharded at all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from accelerate.backends.dtensor_io.dcp import (
    METADATA_NAME,
    MODEL_KEY,
    OPTIMIZER_KEY,
    load_model_dcp,
    load_optimizer_dcp,
    save_dcp,
    verify_folder,
)
from accelerate.backends.dtensor_io.state_dict import (
    SHARDED_STATE_DICT,
    full_optimizer_state_dict,
    full_state_dict,
    is_sharded_model,
    load_full_optimizer_state_dict,
    load_full_state_dict,
    model_file_name,
    model_folder_name,
    normalize_state_dict_type,
    optimizer_file_name,
    optimizer_folder_name,
    optimizer_owner,
    raw_optimizer,
)
from accelerate.checkpointing.checkpoint_io import CheckpointIO
from accelerate.collectives.agreement import agree_on_failure
from accelerate.storage.durable_io import FileRecord, SyncGroup, save_torch
from accelerate.storage.errors import CheckpointError


@dataclass
class ShardedParts:
    """Which prepared models are sharded, which optimizers step them, and how to save them."""

    models: dict[int, nn.Module]
    optimizers: dict[int, tuple[Any, nn.Module]] = field(default_factory=dict)
    kind: str = SHARDED_STATE_DICT

    def write(self, staging: Path, *, is_main_process: bool, sync: SyncGroup) -> dict[str, FileRecord]:
        """Writes this process's part into ``staging``; a collective (call it on every process).

        Every part's collectives run on every process even after a failure (a process that stopped
        early would leave the others waiting in the next gather); the first error is raised at the end.
        """
        records: dict[str, FileRecord] = {}
        errors: list[BaseException] = []
        parts = [model_part(model, index) for index, model in self.models.items()]
        parts += [optimizer_part(opt, model, index) for index, (opt, model) in self.optimizers.items()]
        for part in parts:
            try:
                records.update(
                    save_part(part, staging, kind=self.kind, is_main_process=is_main_process, sync=sync)
                )
            except Exception as exc:  # raised below, after the other parts' collectives
                errors.append(exc)
        if errors:
            raise errors[0]
        return records

    def describe(self) -> dict[str, Any]:
        """What the manifest records about the sharded parts."""
        return {
            "state_dict_type": self.kind,
            "models": sorted(self.models),
            "optimizers": sorted(self.optimizers),
        }

    def manifest_extra(self) -> dict[str, Any]:
        return {"fsdp": self.describe()}

    def node_error(self, node: int) -> CheckpointError | None:
        if node == 0:
            return None
        # Found on the ranks of other nodes only: agreed on in the first exchange, so node 0's ranks
        # raise too instead of waiting in DCP's collectives for ranks that never come.
        return CheckpointError(
            "save_state of a sharded (FSDP) model with save_on_each_node=True on several nodes: "
            "torch.distributed.checkpoint writes one checkpoint across all nodes, so it needs a "
            "shared filesystem; set ProjectConfiguration(save_on_each_node=False)."
        )


@dataclass(frozen=True)
class Part:
    """One sharded model or optimizer as saved: its DCP ``folder`` or full ``file`` name, and its state.

    ``sharded()`` is this process's shard (for DCP); ``full()`` gathers the whole state (a collective).
    """

    folder: str
    file: str
    sharded: Callable[[], dict[str, Any]]
    full: Callable[[], Any]


def model_part(model: nn.Module, index: int) -> Part:
    """Model ``index`` of the checkpoint (``pytorch_model_fsdp_{index}/`` or its full file)."""

    def sharded() -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return {MODEL_KEY: get_model_state_dict(model)}

    return Part(model_folder_name(index), model_file_name(index), sharded, lambda: full_state_dict(model))


def optimizer_part(optimizer: Any, model: nn.Module, index: int) -> Part:
    """Optimizer ``index``, which steps the sharded ``model`` (``optimizer_{index}/`` or ``optimizer.bin``)."""

    def sharded() -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return {OPTIMIZER_KEY: get_optimizer_state_dict(model, raw_optimizer(optimizer))}

    def full() -> Any:
        return full_optimizer_state_dict(model, optimizer)

    return Part(optimizer_folder_name(index), optimizer_file_name(index), sharded, full)


def save_part(
    part: Part,
    directory: Path,
    *,
    kind: str,
    is_main_process: bool,
    sync: SyncGroup | None = None,
    checksum: bool = True,
) -> dict[str, FileRecord]:
    """``part`` into ``directory``: a DCP folder (every process writes its shard) or process 0's full file.

    Returns the records of the files this process wrote, named relative to ``directory``.
    """
    if kind == SHARDED_STATE_DICT:
        return save_dcp(part.sharded(), directory / part.folder, root=directory)
    full = part.full()  # a collective: before the main-process-only write
    if not is_main_process:
        return {}
    return {part.file: save_torch(full, directory / part.file, sync=sync, checksum=checksum)}


def plan_sharded(models: Sequence[nn.Module], optimizers: Sequence[Any], kind: Any) -> ShardedParts | None:
    """The sharded models among ``models`` (unwrapped) and the optimizers stepping them; None if none."""
    sharded = {i: m for i, m in enumerate(models) if is_sharded_model(m)}
    if not sharded:
        return None
    owned: dict[int, tuple[Any, nn.Module]] = {}
    for index, optimizer in enumerate(optimizers):
        owner = optimizer_owner(optimizer, models)
        if owner in sharded:
            owned[index] = (optimizer, sharded[owner])
    return ShardedParts(sharded, owned, normalize_state_dict_type(kind))


# --- loading ----------------------------------------------------------------------------------------
def _dcp_folder(reader: Any, name: str, *, rank: int, world_size: int) -> Path | None:
    """The DCP folder ``name`` when the checkpoint has it (verified, this process's share), else None."""
    if not reader.has(f"{name}/{METADATA_NAME}"):
        return None
    folder: Path = reader.path(f"{name}/{METADATA_NAME}").parent
    if reader.manifest is None:
        return folder  # upstream's folders: loaded unverified (the reader warned)
    error: BaseException | None = None
    try:
        verify_folder(reader.manifest.files, name, folder, rank=rank, world_size=world_size)
    except CheckpointError as exc:
        error = exc
    # Each process checked its share; all must learn of a damaged file before DCP's collectives.
    agree_on_failure(error, what=f"Loading {folder}", error_type=CheckpointError)
    return folder


def load_model(
    reader: Any, index: int, model: nn.Module, *, strict: bool, rank: int, world_size: int, part: bool = False
) -> bool:
    """Loads model ``index`` from an FSDP layout; False when the checkpoint has the plain layout.

    ``part``: ``model`` is a part of the saved model (a pipeline stage), which loads from DCP folders.
    """
    folder = _dcp_folder(reader, model_folder_name(index), rank=rank, world_size=world_size)
    if folder is not None:
        load_model_dcp(model, folder, strict=strict, part=part)
        return True
    name = model_file_name(index)
    if reader.has(name):
        load_full_state_dict(model, reader.torch_file(name, f"model {index}"), strict=strict)
        return True
    return False


def has_optimizer_folder(reader: Any, index: int) -> bool:
    return bool(reader.has(f"{optimizer_folder_name(index)}/{METADATA_NAME}"))


def load_optimizer(
    reader: Any, index: int, optimizer: Any, models: Sequence[nn.Module], *, rank: int, world_size: int
) -> None:
    """Loads optimizer ``index`` from its DCP folder into the model it steps."""
    folder = _dcp_folder(reader, optimizer_folder_name(index), rank=rank, world_size=world_size)
    owner = optimizer_owner(optimizer, models)
    if folder is None or owner is None:
        raise CheckpointError(
            f"Checkpoint {reader.directory}: optimizer {index} was saved sharded, but it steps none of the "
            "prepared models; prepare the model it was built for."
        )
    load_optimizer_dcp(models[owner], optimizer, folder)


def load_full_optimizer(optimizer: Any, models: Sequence[nn.Module], state: Mapping[str, Any]) -> bool:
    """Loads a full optimizer state into an optimizer of a sharded model; False for plain ones.

    A state keyed by parameter names (FULL_STATE_DICT) also loads into a plain model's optimizer.
    """
    owner = optimizer_owner(optimizer, models)
    named = any(isinstance(key, str) for key in state.get("state", {}))
    if owner is None or not (named or is_sharded_model(models[owner])):
        return False
    load_full_optimizer_state_dict(models[owner], optimizer, state)
    return True


class ShardedCheckpointIO(CheckpointIO):
    """Checkpoint I/O for sharded (DTensor) models in FSDP's layouts; plain models stay plain files.

    Args:
        state_dict_type: the FSDP plugin's ``state_dict_type`` (enum, name or None: sharded), how
            sharded models are saved; any layout loads whatever it is.
    """

    what = "FSDP-sharded models"

    def __init__(self, state_dict_type: Any = None) -> None:
        self.state_dict_type = state_dict_type

    @classmethod
    def for_run(cls, run: Any) -> ShardedCheckpointIO:
        """The I/O for a run description (``AcceleratorState``): its FSDP plugin's state_dict_type, if any."""
        return cls(getattr(getattr(run, "fsdp_plugin", None), "state_dict_type", None))

    def plan_save(self, models: Sequence[nn.Module], optimizers: Sequence[Any]) -> ShardedParts | None:
        return plan_sharded(models, optimizers, self.state_dict_type)

    def load_model(
        self, reader: Any, index: int, model: nn.Module, *, strict: bool, rank: int, world_size: int
    ) -> bool:
        # The FSDP layouts (sharded folders or gathered files) load into sharded and plain models alike.
        return load_model(reader, index, model, strict=strict, rank=rank, world_size=world_size)

    def has_model(self, reader: Any, index: int) -> bool:
        # A DCP folder or a gathered file: read inside their own collectives.
        return bool(
            reader.has(f"{model_folder_name(index)}/{METADATA_NAME}") or reader.has(model_file_name(index))
        )

    def holds_full_model(self, model: nn.Module) -> bool:
        return is_sharded_model(model)

    def holds_full_optimizer(self, optimizer: Any, models: Sequence[nn.Module]) -> bool:
        owner = optimizer_owner(optimizer, models)
        return owner is not None and is_sharded_model(models[owner])

    def load_full_model(self, model: nn.Module, state_dict: Mapping[str, Any], *, strict: bool) -> bool:
        if not is_sharded_model(model):
            return False
        load_full_state_dict(model, state_dict, strict=strict)  # saved unsharded, loaded sharded
        return True

    def has_optimizer(self, reader: Any, index: int) -> bool:
        return has_optimizer_folder(reader, index)

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
        load_optimizer(reader, index, optimizer, models, rank=rank, world_size=world_size)

    def load_full_optimizer(
        self, optimizer: Any, models: Sequence[nn.Module], state: Mapping[str, Any]
    ) -> bool:
        return load_full_optimizer(optimizer, models, state)

    def full_state_dict(self, model: nn.Module) -> dict[str, Any]:
        return full_state_dict(model)
