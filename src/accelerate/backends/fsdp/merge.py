"""``merge_fsdp_weights``: upstream's name for merging a sharded checkpoint into one weights file.

It takes every format :mod:`accelerate.backends.merge` recognises (a torch.distributed.checkpoint
folder such as ``pytorch_model_fsdp_0`` or the ``save_state`` folder holding it, shards with their
index, a DeepSpeed ZeRO checkpoint, a whole model file) and writes ``OUTPUT_DIR/model.safetensors``
(or ``pytorch_model.bin`` when not ``safe_serialization``). Tied weights stay tied (stored once).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["merge_fsdp_weights"]


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
    from accelerate.backends.merge import merge_weights

    return merge_weights(checkpoint_dir, output_path, safe_serialization, remove_checkpoint_dir).path
