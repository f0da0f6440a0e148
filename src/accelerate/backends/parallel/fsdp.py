"""Step 4, FSDP2 / HSDP: the mesh ``fully_shard`` runs over.

Parameters are sharded over ``dp_shard_cp`` (context-parallel ranks hold different sequence pieces
of the same batch, so they shard parameters like data-parallel ranks); with ``dp_replicate`` too,
over the 2-D ``(dp_replicate, dp_shard_cp)`` mesh, which FSDP2 runs as HSDP (replicate across the
first dimension, shard within the second). Step 5, replication alone (``dp_replicate`` and nothing
sharded) is plain DDP, chosen by the resolver before this package is involved.
"""

from __future__ import annotations

from typing import Any

from accelerate.utils.errors import NotAvailableYetError


def fsdp_mesh(config: Any) -> Any:
    """The (sub-)mesh of ``config.device_mesh`` that FSDP2 shards over, or None for nothing to shard.

    Raises:
        NotAvailableYetError: ``dp_replicate`` with tensor parallelism but no sharded dimension.
    """
    mesh = config.device_mesh
    shard_dims = config.dp_shard_cp_dim_names
    if not shard_dims:
        if config.dp_replicate_enabled:
            raise NotAvailableYetError(
                f"ParallelismConfig(dp_replicate_size={config.dp_replicate_size}, tp_size={config.tp_size}) "
                "replicates a tensor-parallel model without sharding it, which is not available yet. Shard "
                f"instead: dp_shard_size={config.dp_replicate_size} (FSDP over the same processes)."
            )
        return None  # tensor parallelism alone: every parameter is already split or replicated by the plan
    # One dimension needs no flattening: use it directly (slicing a flattened name is deprecated).
    shard = shard_dims[0] if len(shard_dims) == 1 else "dp_shard_cp"
    if config.dp_replicate_enabled:
        return mesh[("dp_replicate", shard)]
    return mesh[shard] if len(shard_dims) == 1 else config.submesh("dp_shard_cp")
