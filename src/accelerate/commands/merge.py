"""``accelerate merge-weights CHECKPOINT_DIR OUTPUT_DIR``: one weights file from a sharded checkpoint.

Reads a folder of shards with their index (``model-00001-of-00003.safetensors`` +
``model.safetensors.index.json``, or the ``pytorch_model`` ``.bin`` family, as ``save_model`` writes
them) or a ``torch.distributed.checkpoint`` folder (a ``.metadata`` file beside ``*.distcp`` files, as
sharded FSDP saves write), and writes ``OUTPUT_DIR/model.safetensors`` (or ``pytorch_model.bin`` with
``--unsafe_serialization``). Tied weights stay tied (stored once). Shards are read without running
pickle code; a torch.distributed.checkpoint folder is read by torch's own reader, whose ``.metadata``
file is a pickle, so merge only such folders that you trust.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

HELP = "Merge a sharded checkpoint (shards + index, or a torch.distributed.checkpoint folder) into one file."


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "merge-weights", help=HELP, description=HELP, allow_abbrev=False
    )
    parser.add_argument("checkpoint_directory", metavar="CHECKPOINT_DIR", help="The sharded checkpoint folder.")
    parser.add_argument("output_path", metavar="OUTPUT_DIR", help="Folder to write the merged file into.")
    parser.add_argument("--unsafe_serialization", "--unsafe-serialization", dest="unsafe_serialization",
                        action="store_true", help="Write pytorch_model.bin (torch.save) instead of safetensors.")  # fmt: skip
    parser.add_argument("--remove_checkpoint_dir", "--remove-checkpoint-dir", dest="remove_checkpoint_dir",
                        action="store_true", help="Delete CHECKPOINT_DIR once the merged file is written.")  # fmt: skip
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        written = merge_fsdp_weights(
            args.checkpoint_directory,
            args.output_path,
            safe_serialization=not args.unsafe_serialization,
            remove_checkpoint_dir=args.remove_checkpoint_dir,
        )
    except (ValueError, FileNotFoundError, OSError) as exc:
        print(f"accelerate merge-weights: error: {exc}", file=sys.stderr)
        return 2
    print(f"accelerate merge-weights: wrote {written}")
    return 0


def _read_distcp(folder: Path) -> dict[str, Any]:
    """A torch.distributed.checkpoint folder as one plain state dict (the ``model`` entry if wrapped)."""
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict[str, Any] = {}
    _load_state_dict(state, storage_reader=FileSystemReader(folder), planner=_EmptyStateDictLoadPlanner(),
                     no_dist=True)  # fmt: skip
    if set(state) == {"model"} and isinstance(state["model"], dict):
        return dict(state["model"])
    return state


def _read_shards(folder: Path) -> dict[str, Any]:
    from accelerate.checkpointing.model_files import load_state_dict_file, resolve_checkpoint

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
        >>> merge_fsdp_weights("ckpt/model_shards", "merged")  # merged/model.safetensors
    """
    from accelerate.checkpointing.model_files import save_model_files

    source, target = Path(checkpoint_dir), Path(output_path)
    if not source.is_dir():
        raise FileNotFoundError(f"checkpoint_dir {source} is not a folder.")
    if target.resolve() == source.resolve():
        raise ValueError(
            f"output_path {target} is the checkpoint folder itself; writing there would replace the shards. "
            "Give another folder."
        )
    if remove_checkpoint_dir and (target.resolve() == source.resolve() or source.resolve() in target.resolve().parents):
        raise ValueError(
            f"--remove_checkpoint_dir would delete the merged file too: {target} is inside {source}. "
            "Write the merged file elsewhere."
        )
    state = _read_distcp(source) if (source / ".metadata").is_file() else _read_shards(source)
    if not state:
        raise ValueError(f"{source} holds no weights.")
    # One file: a limit no state dict reaches.
    written = save_model_files(state, target, max_shard_size=2**62, safe_serialization=safe_serialization)
    if remove_checkpoint_dir:
        shutil.rmtree(source)
    return written[0]
