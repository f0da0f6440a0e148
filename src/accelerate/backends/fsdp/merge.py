"""One weights file from a sharded checkpoint: what ``accelerate merge-weights`` and
``merge_fsdp_weights`` do.

Reads, in one process without a process group:

* a ``torch.distributed.checkpoint`` folder (``.metadata`` beside ``*.distcp`` files), such as the
  ``pytorch_model_fsdp_0`` folder that ``save_state`` writes for a sharded model (its ``model``
  entry is taken);
* a ``save_state`` checkpoint folder holding ``pytorch_model_fsdp_0`` (files are verified against
  the checkpoint's manifest first);
* a folder of shards with their index (``model-00001-of-00003.safetensors`` +
  ``model.safetensors.index.json``, or the ``pytorch_model`` ``.bin`` family).

Writes ``OUTPUT_DIR/model.safetensors`` (or ``pytorch_model.bin`` when not ``safe_serialization``).
Tied weights stay tied (stored once). Shards are read without running pickle code; a DCP folder's
``.metadata`` is a pickle read by torch's own reader, so merge only folders that you trust.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from accelerate.backends.dtensor_io.dcp import METADATA_NAME, MODEL_KEY, read_full_dcp
from accelerate.backends.dtensor_io.state_dict import model_folder_name

__all__ = ["merge_fsdp_weights"]


def _dcp_source(folder: Path) -> Path | None:
    """The DCP folder to read for ``folder`` (itself, or a save_state checkpoint's first model's)."""
    if (folder / METADATA_NAME).is_file():
        return folder
    inner = folder / model_folder_name(0)
    if (inner / METADATA_NAME).is_file():
        _verify_against_manifest(folder, inner.name)
        return inner
    return None


def _verify_against_manifest(checkpoint: Path, folder_name: str) -> None:
    from accelerate.backends.dtensor_io.dcp import verify_folder
    from accelerate.storage.atomic import read_manifest

    manifest = read_manifest(checkpoint)
    if manifest is not None:  # upstream's folders have none: read unverified
        verify_folder(manifest.files, folder_name, checkpoint / folder_name, rank=0, world_size=1)


def _read_distcp(folder: Path) -> dict[str, Any]:
    state = read_full_dcp(folder)
    if set(state) == {MODEL_KEY} and isinstance(state[MODEL_KEY], dict):
        return dict(state[MODEL_KEY])
    return state


def _read_shards(folder: Path) -> dict[str, Any]:
    from accelerate.storage.model_files import load_state_dict_file, resolve_checkpoint

    files, aliases = resolve_checkpoint(folder)
    state: dict[str, Any] = {}
    for file in files:
        for name, value in load_state_dict_file(file).items():
            if name in state:
                raise ValueError(f"{name!r} is stored in two shards of {folder} (the second is {file.name}).")
            state[name] = value
    missing = sorted(target for target in aliases.values() if target not in state)
    if missing:
        raise ValueError(f"The index of {folder} names tied weights whose source is in no shard: {missing}.")
    state.update({alias: state[target] for alias, target in aliases.items()})
    return state


def merge_fsdp_weights(
    checkpoint_dir: str,
    output_path: str,
    safe_serialization: bool = True,
    remove_checkpoint_dir: bool = False,
) -> Path:
    """Merges the shards in ``checkpoint_dir`` into one weights file in ``output_path``; returns its path.

    Example:
        >>> merge_fsdp_weights("ckpt/pytorch_model_fsdp_0", "merged")  # merged/model.safetensors
    """
    from accelerate.storage.model_files import save_model_files

    source, target = Path(checkpoint_dir), Path(output_path)
    if not source.is_dir():
        raise FileNotFoundError(f"checkpoint_dir {source} is not a folder.")
    if target.resolve() == source.resolve():
        raise ValueError(
            f"output_path {target} is the checkpoint folder itself; writing there would replace the shards. "
            "Give another folder."
        )
    if remove_checkpoint_dir and source.resolve() in target.resolve().parents:
        raise ValueError(
            f"--remove_checkpoint_dir would delete the merged file too: {target} is inside {source}. "
            "Write the merged file elsewhere."
        )
    dcp_folder = _dcp_source(source)
    state = _read_distcp(dcp_folder) if dcp_folder is not None else _read_shards(source)
    if not state:
        raise ValueError(f"{source} holds no weights.")
    # One file: a limit no state dict reaches.
    written = save_model_files(state, target, max_shard_size=2**62, safe_serialization=safe_serialization)
    if remove_checkpoint_dir:
        shutil.rmtree(source)
    return written[0]
