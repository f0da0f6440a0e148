"""Checkpoint I/O for DTensor (sharded) models: the default ``Strategy.checkpoint_io()`` of every strategy.

A model is sharded when its parameters are ``DTensor`` s (FSDP2's ``fully_shard``, tensor or
context parallelism, or a model sharded by hand), which any strategy may hold, and a sharded
checkpoint may be loaded into a plain DDP or single-device run. So this I/O belongs to no single
backend: FSDP, DDP, single-device and the composed-parallelism strategy all use it from here.

Read in this order, each module with one job:

``state_dict``: sharded models told apart by their parameters, gathered to and loaded from full
state dicts, and upstream's checkpoint names (``pytorch_model_fsdp_{i}``, ``optimizer_{i}``).
``dcp``: torch.distributed.checkpoint folders inside our checksummed, manifest-committed checkpoints
(resharding on load). ``checkpoint_io``: :class:`ShardedCheckpointIO`, the sharded models' parts of
``save_state`` / ``load_state`` (DCP folders or process 0's full files); plain models stay plain
files, so that ``checkpointing/`` itself knows no backend.

Nothing here is imported by ``import accelerate``; the names below load their module on first use.
"""

from accelerate._lazy import lazy_exports

_EXPORTS = {
    "ShardedCheckpointIO": "accelerate.backends.dtensor_io.checkpoint_io",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
