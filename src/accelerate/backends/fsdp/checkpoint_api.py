"""Upstream's FSDP checkpoint helpers (``accelerate.utils.save_fsdp_model`` and friends), by signature.

They read and write the same layouts as ``save_state`` (``pytorch_model_fsdp_{i}/`` and
``optimizer_{i}/`` DCP folders, or ``pytorch_model_fsdp.bin`` / ``optimizer.bin`` from process 0
with ``FULL_STATE_DICT``), but as plain folders without our manifest: callers such as the
transformers Trainer manage the surrounding checkpoint themselves. Every function is a collective:
call it on every process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import nn

from accelerate.backends.dtensor_io.checkpoint_io import Part, model_part, optimizer_part, save_part
from accelerate.backends.dtensor_io.dcp import load_model_dcp, load_optimizer_dcp
from accelerate.backends.dtensor_io.state_dict import (
    FSDP_MODEL_NAME,
    OPTIMIZER_NAME,
    SHARDED_STATE_DICT,
    load_full_optimizer_state_dict,
    load_full_state_dict,
    model_file_name,
    model_folder_name,
    normalize_state_dict_type,
    optimizer_file_name,
    optimizer_folder_name,
)

__all__ = [
    "fsdp2_load_full_state_dict",
    "load_fsdp_model",
    "load_fsdp_optimizer",
    "save_fsdp_model",
    "save_fsdp_optimizer",
]


def _kind(fsdp_plugin: Any) -> str:
    return normalize_state_dict_type(getattr(fsdp_plugin, "state_dict_type", None))


def _no_adapter_only(call: str, adapter_only: bool) -> None:
    if adapter_only:
        raise NotImplementedError(
            f"{call}(adapter_only=True): saving only a PEFT adapter of a sharded model is not supported; "
            "pass adapter_only=False (the whole model is saved, adapter included), or save the adapter "
            "with peft's save_pretrained after accelerator.get_state_dict(model)."
        )


def _is_main(accelerator: Any) -> bool:
    return bool(getattr(accelerator, "is_main_process", True))


def _wait(accelerator: Any) -> None:
    wait = getattr(accelerator, "wait_for_everyone", None)
    if callable(wait):
        wait()


def _unwrap(accelerator: Any, model: nn.Module) -> nn.Module:
    unwrap = getattr(accelerator, "unwrap_model", None)
    return unwrap(model, keep_torch_compile=False) if callable(unwrap) else model


def _dcp_folder(directory: str | os.PathLike[str], name: str, stem: str) -> Path:
    """``directory/name``, unless ``directory`` already is such a folder (upstream accepts both)."""
    path = Path(directory)
    return path if stem in path.name else path / name


def _save(part: Part, output_dir: str, fsdp_plugin: Any, accelerator: Any) -> None:
    """Writes ``part`` as ``save_state`` lays it out, but unchecksummed (no manifest lists it), then waits."""
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    save_part(
        part, Path(output_dir), kind=_kind(fsdp_plugin), is_main_process=_is_main(accelerator), checksum=False
    )
    _wait(accelerator)


def save_fsdp_model(
    fsdp_plugin: Any,
    accelerator: Any,
    model: nn.Module,
    output_dir: str,
    model_index: int = 0,
    adapter_only: bool = False,
    use_dcp: bool = True,
) -> None:
    """Saves a sharded model into ``output_dir`` the way ``save_state`` does (see the module doc).

    Example:
        >>> save_fsdp_model(accelerator.state.fsdp_plugin, accelerator, model, "ckpt")  # ckpt/pytorch_model_fsdp_0/
    """
    _no_adapter_only("save_fsdp_model", adapter_only)
    _save(model_part(_unwrap(accelerator, model), model_index), output_dir, fsdp_plugin, accelerator)


def load_fsdp_model(
    fsdp_plugin: Any,
    accelerator: Any,
    model: nn.Module,
    input_dir: str,
    model_index: int = 0,
    adapter_only: bool = False,
    use_dcp: bool = True,
) -> None:
    """Loads what :func:`save_fsdp_model` wrote into ``model`` (sharded over any number of processes)."""
    _no_adapter_only("load_fsdp_model", adapter_only)
    model = _unwrap(accelerator, model)
    if _kind(fsdp_plugin) == SHARDED_STATE_DICT:
        load_model_dcp(model, _dcp_folder(input_dir, model_folder_name(model_index), FSDP_MODEL_NAME))
    else:
        from accelerate.storage.model_files import load_state_dict_file

        load_full_state_dict(model, load_state_dict_file(Path(input_dir) / model_file_name(model_index)))
    _wait(accelerator)


def save_fsdp_optimizer(
    fsdp_plugin: Any,
    accelerator: Any,
    optimizer: Any,
    model: nn.Module,
    output_dir: str,
    optimizer_index: int = 0,
    use_dcp: bool = True,
) -> None:
    """Saves the optimizer of a sharded model (``optimizer_{i}/``, or ``optimizer.bin`` when full)."""
    part = optimizer_part(optimizer, _unwrap(accelerator, model), optimizer_index)
    _save(part, output_dir, fsdp_plugin, accelerator)


def load_fsdp_optimizer(
    fsdp_plugin: Any,
    accelerator: Any,
    optimizer: Any,
    model: nn.Module,
    input_dir: str,
    optimizer_index: int = 0,
    adapter_only: bool = False,
    use_dcp: bool = True,
) -> None:
    """Loads what :func:`save_fsdp_optimizer` wrote into ``optimizer`` (resharded as needed)."""
    _no_adapter_only("load_fsdp_optimizer", adapter_only)
    model = _unwrap(accelerator, model)
    if _kind(fsdp_plugin) == SHARDED_STATE_DICT:
        folder = _dcp_folder(input_dir, optimizer_folder_name(optimizer_index), OPTIMIZER_NAME)
        load_optimizer_dcp(model, optimizer, folder)
    else:
        from accelerate.storage.model_files import torch_load_file

        state = torch_load_file(Path(input_dir) / optimizer_file_name(optimizer_index))
        load_full_optimizer_state_dict(model, optimizer, state)
    _wait(accelerator)


def fsdp2_load_full_state_dict(
    accelerator: Any, model: nn.Module, full_sd: dict[str, Any], cpu_offload: bool = False
) -> None:
    """Shards a full state dict held by process 0 into ``model`` (the others may pass ``{}``).

    Process 0's tensors are broadcast, so only one process ever reads the weights from disk.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, cpu_offload=cpu_offload)
    set_model_state_dict(model, full_sd, options=options)
