"""One weights file from any checkpoint folder of ours: what ``accelerate merge-weights`` does.

The format is recognised from the folder's files (and said, in :attr:`Merged.found`):

* **DeepSpeed ZeRO 1, 2 or 3**: a ``save_state`` folder of a DeepSpeed run (its ``pytorch_model/``
  tag folder), or the tag folder itself. The partitions are gathered in this process by DeepSpeed's
  ``zero_to_fp32`` helper (fp32 weights; no process group).
* **torch.distributed.checkpoint** (FSDP2 sharded, or N-D: DTensors over ``dp_shard x tp``): a
  ``save_state`` folder holding ``pytorch_model_fsdp_0``, or such a folder itself.
* **Shards with their index** (``model-00001-of-00003.safetensors`` + ``model.safetensors.index.json``,
  or the ``pytorch_model`` ``.bin`` family), as ``save_model`` writes them.
* **A whole model file** (``model.safetensors`` / ``pytorch_model.bin``): what ``save_state`` writes
  for a plain or DDP model; it is checked (against the manifest when there is one) and copied.

Inside a ``save_state`` folder every file read is checked against the manifest first. DeepSpeed's
files and a DCP folder's ``.metadata`` are pickles read by their own library: merge only folders
you trust. Shards are read without running pickle code.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Merged", "merge_weights"]

_DEEPSPEED_TAG = "pytorch_model"  # the first engine's tag (save_state's name for it)


@dataclass(frozen=True)
class Merged:
    """The file written, and the format that was found (a sentence fragment for the CLI)."""

    path: Path
    found: str


def _records(checkpoint: Path) -> dict[str, Any]:
    from accelerate.storage.atomic import read_manifest

    manifest = read_manifest(checkpoint)
    return dict(manifest.files) if manifest is not None else {}


def _deepspeed_folder(source: Path) -> Any:
    """The ZeroFolder for ``source`` (a save_state folder or a tag folder), or None."""
    from accelerate.backends.deepspeed.zero_files import ZeroFolder, is_zero_folder

    if is_zero_folder(source):
        parent = source.parent
        return ZeroFolder(source, _records(parent), parent)
    latest = source / "latest"
    tag = latest.read_text().strip() if latest.is_file() else _DEEPSPEED_TAG
    if "/" not in tag and is_zero_folder(source / tag):
        return ZeroFolder(source / tag, _records(source), source)
    return None


def _read_deepspeed(folder: Any) -> tuple[dict[str, Any], str]:
    from accelerate.backends.deepspeed.zero_files import (
        full_fp32_weights,
        read_partitioned_state,
        whole_weights,
    )

    files = folder.optim_files()
    stage = folder.load(files[0])["optimizer_state_dict"].get("zero_stage")
    if stage is None:  # DeepSpeed's BF16_Optimizer, whose files zero_to_fp32 does not read
        saved = read_partitioned_state(folder)
        found = f"a DeepSpeed BF16_Optimizer (ZeRO-1) checkpoint saved by {len(files)} process(es) ({folder.path})"
        return whole_weights(folder, saved), found
    state = full_fp32_weights(folder)
    return (
        state,
        f"a DeepSpeed ZeRO-{int(stage)} checkpoint saved by {len(files)} process(es) ({folder.path})",
    )


def _read_dcp(source: Path) -> tuple[dict[str, Any], str] | None:
    from accelerate.backends.dtensor_io.dcp import METADATA_NAME, MODEL_KEY, read_full_dcp, verify_folder
    from accelerate.backends.dtensor_io.state_dict import model_folder_name

    if (source / METADATA_NAME).is_file():
        folder = source
    elif (source / model_folder_name(0) / METADATA_NAME).is_file():
        folder = source / model_folder_name(0)
        records = _records(source)
        if records:  # upstream's folders have no manifest: read unverified
            verify_folder(records, folder.name, folder, rank=0, world_size=1)
    else:
        return None
    state = read_full_dcp(folder)
    if set(state) == {MODEL_KEY} and isinstance(state[MODEL_KEY], dict):
        state = dict(state[MODEL_KEY])
    writers = len(list(folder.glob("*.distcp")))
    return (
        state,
        f"a torch.distributed.checkpoint folder (FSDP2 or N-D sharded; {writers} file(s)) ({folder})",
    )


def _read_weight_files(source: Path) -> tuple[dict[str, Any], str] | None:
    from accelerate.storage.model_files import load_state_dict_file, resolve_checkpoint

    try:
        files, aliases = resolve_checkpoint(source)
    except ValueError:
        return None
    records = _records(source)
    state: dict[str, Any] = {}
    for file in files:
        for name, value in load_state_dict_file(file, records.get(file.name)).items():
            if name in state:
                raise ValueError(f"{name!r} is stored in two shards of {source} (the second is {file.name}).")
            state[name] = value
    missing = sorted(target for target in aliases.values() if target not in state)
    if missing:
        raise ValueError(f"The index of {source} names tied weights whose source is in no shard: {missing}.")
    state.update({alias: state[target] for alias, target in aliases.items()})
    if len(files) == 1:
        checked = (
            "checked against the manifest" if files[0].name in records else "not verifiable: no manifest"
        )
        return state, f"a whole model file {files[0].name} (plain or DDP save_state; {checked})"
    return state, f"sharded weights with an index ({len(files)} files)"


def read_any(source: Path) -> tuple[dict[str, Any], str]:
    """The full state dict in ``source`` and the format found; a ValueError names what was looked for."""
    deepspeed = _deepspeed_folder(source)
    if deepspeed is not None:
        return _read_deepspeed(deepspeed)
    for reader in (_read_dcp, _read_weight_files):
        found = reader(source)
        if found is not None:
            return found
    names = sorted(p.name for p in source.iterdir())[:12]
    raise ValueError(
        f"{source} is no checkpoint merge-weights knows. It looked for: a DeepSpeed tag folder "
        "(pytorch_model/ with *_optim_states.pt), a torch.distributed.checkpoint folder (.metadata, or "
        "pytorch_model_fsdp_0/.metadata), shards with a *.index.json, or model.safetensors / pytorch_model.bin; "
        f"the folder holds {names or 'nothing'}. Point it at a save_state or save_model folder."
    )


def merge_weights(
    checkpoint_dir: str,
    output_path: str,
    safe_serialization: bool = True,
    remove_checkpoint_dir: bool = False,
) -> Merged:
    """Writes the whole model in ``checkpoint_dir`` (any format above) as one file in ``output_path``.

    Example:
        >>> merge_weights("ckpt", "merged").path  # doctest: +SKIP
        PosixPath('merged/model.safetensors')
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
    state, found = read_any(source)
    if not state:
        raise ValueError(f"{source} holds no weights ({found}).")
    # One file: a limit no state dict reaches.
    written = save_model_files(state, target, max_shard_size=2**62, safe_serialization=safe_serialization)
    if remove_checkpoint_dir:
        shutil.rmtree(source)
    return Merged(written[0], found)
