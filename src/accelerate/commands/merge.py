"""``accelerate merge-weights CHECKPOINT_DIR OUTPUT_DIR``: one weights file from any checkpoint of ours.

Takes a ``save_state`` folder of any layout (plain or DDP, FSDP2 sharded, N-D, DeepSpeed ZeRO 1-3), a
``torch.distributed.checkpoint`` folder, or a folder of shards with their index (as ``save_model``
writes them), says which format it found, and writes ``OUTPUT_DIR/model.safetensors`` (or
``pytorch_model.bin`` with ``--unsafe_serialization``) that a one-process model loads with
``load_state_dict(strict=True)``. Tied weights stay tied (stored once). Files inside a ``save_state``
folder are checked against its manifest first. DeepSpeed's files and a DCP folder's ``.metadata`` are
pickles read by their own library, so merge only such folders that you trust. See
:mod:`accelerate.backends.merge` for how each format is recognised.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

HELP = (
    "Merge a checkpoint folder (save_state of DDP, FSDP2, N-D or DeepSpeed ZeRO 1-3; shards + index; "
    "a torch.distributed.checkpoint folder) into one weights file."
)


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
    from accelerate.backends.merge import merge_weights

    try:
        merged = merge_weights(
            args.checkpoint_directory,
            args.output_path,
            safe_serialization=not args.unsafe_serialization,
            remove_checkpoint_dir=args.remove_checkpoint_dir,
        )
    except (ValueError, OSError, RuntimeError) as exc:  # RuntimeError: a damaged file (CheckpointError)
        print(f"accelerate merge-weights: error: {exc}", file=sys.stderr)
        return 2
    print(f"accelerate merge-weights: found {merged.found}")
    print(f"accelerate merge-weights: wrote {merged.path}")
    return 0


def __getattr__(name: str) -> Any:
    # The merge itself lives in backends/fsdp/merge.py (it imports torch, which CLI start-up must not).
    if name == "merge_fsdp_weights":
        from accelerate.backends.fsdp.merge import merge_fsdp_weights

        return merge_fsdp_weights
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
