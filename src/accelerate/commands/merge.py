"""``accelerate merge-weights CHECKPOINT_DIR OUTPUT_DIR``: one weights file from a sharded checkpoint.

Reads a ``save_state`` folder of a sharded model (its ``pytorch_model_fsdp_0``), a folder of shards with their index (``model-00001-of-00003.safetensors`` +
``model.safetensors.index.json``, or the ``pytorch_model`` ``.bin`` family, as ``save_model`` writes
them) or a ``torch.distributed.checkpoint`` folder (a ``.metadata`` file beside ``*.distcp`` files, as
sharded FSDP saves write), and writes ``OUTPUT_DIR/model.safetensors`` (or ``pytorch_model.bin`` with
``--unsafe_serialization``). Tied weights stay tied (stored once). Shards are read without running
pickle code; a torch.distributed.checkpoint folder is read by torch's own reader, whose ``.metadata``
file is a pickle, so merge only such folders that you trust.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

HELP = "Merge a sharded checkpoint (shards + index, or a torch.distributed.checkpoint folder) into one file."


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "merge-weights", help=HELP, description=HELP, allow_abbrev=False
    )
    parser.add_argument(
        "checkpoint_directory", metavar="CHECKPOINT_DIR", help="The sharded checkpoint folder."
    )
    parser.add_argument("output_path", metavar="OUTPUT_DIR", help="Folder to write the merged file into.")
    parser.add_argument("--unsafe_serialization", "--unsafe-serialization", dest="unsafe_serialization",
                        action="store_true", help="Write pytorch_model.bin (torch.save) instead of safetensors.")  # fmt: skip
    parser.add_argument("--remove_checkpoint_dir", "--remove-checkpoint-dir", dest="remove_checkpoint_dir",
                        action="store_true", help="Delete CHECKPOINT_DIR once the merged file is written.")  # fmt: skip
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from accelerate.backends.fsdp.merge import merge_fsdp_weights

    try:
        written = merge_fsdp_weights(
            args.checkpoint_directory,
            args.output_path,
            safe_serialization=not args.unsafe_serialization,
            remove_checkpoint_dir=args.remove_checkpoint_dir,
        )
    except (ValueError, OSError, RuntimeError) as exc:  # RuntimeError: a damaged file (CheckpointError)
        print(f"accelerate merge-weights: error: {exc}", file=sys.stderr)
        return 2
    print(f"accelerate merge-weights: wrote {written}")
    return 0


def __getattr__(name: str) -> Any:
    # The merge itself lives in backends/fsdp/merge.py (it imports torch, which CLI start-up must not).
    if name == "merge_fsdp_weights":
        from accelerate.backends.fsdp.merge import merge_fsdp_weights

        return merge_fsdp_weights
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
