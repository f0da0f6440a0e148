"""FSDP: fully sharded data parallelism on FSDP2 (``torch.distributed.fsdp.fully_shard``), in one package.

Read in this order, each module with one job:

``plugin``: :class:`FullyShardedDataParallelPlugin`, upstream's settings dataclass (what
``accelerate.utils.FullyShardedDataParallelPlugin`` names), and the ``FSDP_*`` environment variables
that carry it from the launcher; FSDP1 settings are kept as given and translated onto FSDP2 there
(``fsdp2_layout``). No torch at import: the launcher reads its tables.

``launch``: ``accelerate launch --use_fsdp --fsdp_*`` and a config file's ``fsdp_config`` resolved
(flags over file, each value checked) into the child's ``FSDP_*`` variables; ``convert``: the FSDP1 ->
FSDP2 rewrite of a config file that ``accelerate to-fsdp2`` writes. Both pure data, no torch.

``wrap``: which sub-modules are sharded on their own (upstream's auto-wrap policies, children before
parents). ``strategy``: :class:`FSDPStrategy`, the backend itself: the device mesh (1-D, or replicate x
shard for NO_SHARD / HYBRID_SHARD), ``fully_shard`` per block then the root, rank-0 loading and
broadcast, optimizers pointed at the shards, ``no_sync``, and clipping by the global norm.

The checkpoint layouts of sharded (DTensor) models, which every strategy reads and writes (a model
sharded by hand, or a sharded checkpoint loaded into a plain run), live in
:mod:`accelerate.backends.dtensor_io`. ``checkpoint_api``: upstream's ``save_fsdp_model`` /
``load_fsdp_model`` / ``*_optimizer`` / ``fsdp2_load_full_state_dict`` over those layouts.

``merge``: one weights file from a sharded checkpoint (``merge_fsdp_weights``, ``accelerate
merge-weights``). ``api``: upstream's remaining FSDP2 helpers (``fsdp2_prepare_model``, the wrap
predicate, ``get_fsdp2_grad_scaler``, ...). ``accelerate.utils.fsdp_utils`` re-exports the helpers of
``api``, ``checkpoint_api`` and ``merge`` under upstream's names.

Nothing here is imported by ``import accelerate``; the names below load their module on first use.
"""

from accelerate._lazy import lazy_exports

_EXPORTS = {
    "FullyShardedDataParallelPlugin": "accelerate.backends.fsdp.plugin",
    "FSDPStrategy": "accelerate.backends.fsdp.strategy",
    "resolve_fsdp": "accelerate.backends.fsdp.launch",
    "convert_fsdp_config": "accelerate.backends.fsdp.convert",
    "merge_fsdp_weights": "accelerate.backends.fsdp.merge",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
