"""Step 2, activation checkpointing: recompute each block's activations in backward.

Under FSDP the FSDP strategy checkpoints the blocks it shards (before ``fully_shard``); a model
that is only tensor-parallel gets the same treatment here, on the blocks the plugin's wrap policy
names.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from accelerate.backends.fsdp.wrap import modules_to_shard


def apply_activation_checkpointing(model: nn.Module, plugin: Any) -> None:
    """Checkpoints every block the plugin's wrap policy picks (not the root), when the plugin asks."""
    if not plugin.activation_checkpointing:
        return
    from torch.distributed._composable import checkpoint

    for block in modules_to_shard(plugin, model):
        checkpoint(block)
