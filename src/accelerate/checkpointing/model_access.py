"""A model's weights out of a run: ``Accelerator.get_state_dict``, ``save_model`` and ``save``.

The facade's delegate (``accelerator_checkpoints.py``) hands over a :class:`ModelAccess`, a frozen
record of what these calls need from the run (the process, the strategy's state-dict hooks and its
checkpoint I/O); this module never sees the Accelerator. The files themselves are written by
:mod:`accelerate.storage.model_files` and :mod:`accelerate.checkpointing.single_file`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from accelerate.collectives.agreement import agree_on_failure

if TYPE_CHECKING:
    from accelerate.checkpointing.checkpoint_io import CheckpointIO
    from accelerate.checkpointing.training_state import ProcessInfo


@dataclass(frozen=True)
class ModelAccess:
    """What ``get_state_dict`` / ``save_model`` / ``Accelerator.save`` need, handed over explicitly.

    The facade builds it from its strategy and state; this module never sees the Accelerator.
    """

    state: ProcessInfo
    save_on_each_node: bool
    # ``Accelerator.unwrap_model``: the model inside its wrappers.
    unwrap: Callable[..., torch.nn.Module]
    # ``Strategy.full_state_dict``: the whole model gathered by a backend that must (ZeRO-3), else None.
    full_state_dict: Callable[[torch.nn.Module], dict[str, torch.Tensor] | None]
    # ``Strategy.model_state_dict``: a sharded model gathered onto the main process (others: ``{}``).
    model_state_dict: Callable[[torch.nn.Module], dict[str, torch.Tensor]]
    # ``Strategy.checkpoint_io``, called only when a file is written (it may import the backend's I/O).
    checkpoint_io: Callable[[], CheckpointIO]


def get_state_dict(
    access: ModelAccess, model: torch.nn.Module, unwrap: bool = True
) -> dict[str, torch.Tensor]:
    gathered = access.full_state_dict(model)  # ZeRO-3: gathered from every rank
    if gathered is not None:
        return gathered
    if unwrap:
        model = access.unwrap(model, keep_fp32_wrapper=True, keep_torch_compile=False)
    # Sharded models: gathered onto the main process (the others get an empty dict).
    return access.model_state_dict(model)


def save_object(access: ModelAccess, obj: Any, f: Any, *, safe_serialization: bool) -> None:
    """``Accelerator.save``: the main process (each node's, with ``save_on_each_node``) writes ``f`` durably."""
    from accelerate.checkpointing.single_file import save_object as write
    from accelerate.checkpointing.training_state import writer_and_node

    if writer_and_node(access.state, access.save_on_each_node)[0]:
        write(access.checkpoint_io().host_copy(obj), f, safe_serialization=safe_serialization)


def save_model(
    access: ModelAccess,
    model: torch.nn.Module,
    save_directory: str | os.PathLike[str],
    *,
    max_shard_size: int | str,
    safe_serialization: bool,
) -> None:
    from accelerate.storage.model_files import save_model_files

    state_dict = _offloaded_state_dict(access, model)
    if state_dict is None:
        state_dict = get_state_dict(access, model)
    error: BaseException | None = None
    try:
        save_model_files(
            access.checkpoint_io().host_copy(state_dict),
            save_directory,
            max_shard_size=max_shard_size,
            safe_serialization=safe_serialization,
            is_main_process=access.state.is_main_process,
        )
    except Exception as exc:  # told to every rank below, so none waits for a writer that failed
        error = exc
    agree_on_failure(error, what=f"save_model to {save_directory}")


def _offloaded_state_dict(access: ModelAccess, model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """The real weights of a model with blocks offloaded by hooks (``dispatch_model``, ``cpu_offload``,
    ``disk_offload``), or None for any other model.

    Between forwards such blocks hold meta placeholders; as upstream, ``save_model`` loads each
    block from its hook (the CPU copy or the disk) onto the CPU, one at a time, instead.
    """
    from accelerate.big_modeling.loading import get_state_dict_offloaded_model
    from accelerate.big_modeling.tensors import has_offloaded_params

    bare = access.unwrap(model, keep_fp32_wrapper=True, keep_torch_compile=False)
    if not any(has_offloaded_params(module) for module in bare.modules()):
        return None
    return get_state_dict_offloaded_model(bare)
