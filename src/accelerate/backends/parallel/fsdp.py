"""Step 4, FSDP2 / HSDP: the mesh ``fully_shard`` runs over.

Parameters are sharded over ``dp_shard_cp`` (context-parallel ranks hold different sequence pieces
of the same batch, so they shard parameters like data-parallel ranks), or ``dp_shard_sp`` with
sequence (Ulysses) parallelism, for the same reason; with ``dp_replicate`` too,
over the 2-D ``(dp_replicate, dp_shard_cp)`` mesh, which FSDP2 runs as HSDP (replicate across the
first dimension, shard within the second). Step 5, replication alone (``dp_replicate`` and nothing
sharded) is plain DDP, chosen by the resolver before this package is involved; replication of a
tensor-parallel model cannot be DDP (it takes no DTensor parameters), so it is HSDP whose shard
dimension has size 1: every replica keeps its whole tensor-parallel shard and gradients are
all-reduced across replicas, exactly what DDP would do.
"""

from __future__ import annotations

from typing import Any

from accelerate.utils.errors import NotAvailableYetError

# The 2-D mesh that replicates a tensor-parallel model (see replicate_mesh): named apart from the
# N-D mesh's own dimensions, which it is carved from.
REPLICATE_DIMS = ("dp_replicate_hsdp", "dp_shard_hsdp")


def replicate_mesh(config: Any) -> Any:
    """``dp_replicate`` unflattened into ``(dp_replicate, 1)``: FSDP2's HSDP with nothing to shard.

    The mesh must come from the same root mesh as the ``tp`` sub-mesh the model was split on (FSDP2
    composes with tensor parallelism only then), so it is carved out of ``dp_replicate`` rather than
    built anew.

    Raises:
        NotAvailableYetError: this torch's DeviceMesh cannot unflatten a dimension.
    """
    replicate = config.device_mesh["dp_replicate"]
    unflatten = getattr(replicate, "_unflatten", None)
    if unflatten is None:
        raise NotAvailableYetError(
            f"ParallelismConfig(dp_replicate_size={config.dp_replicate_size}, tp_size={config.tp_size}) needs "
            "DeviceMesh._unflatten (torch >= 2.9) to replicate a tensor-parallel model with FSDP2; this torch "
            f"has none. Shard instead: dp_shard_size={config.dp_replicate_size} (FSDP over the same processes)."
        )
    return unflatten(0, (config.dp_replicate_size, 1), REPLICATE_DIMS)


def fsdp_mesh(config: Any) -> Any:
    """The (sub-)mesh of ``config.device_mesh`` that FSDP2 shards over, or None for nothing to shard."""
    mesh = config.device_mesh
    shard_dims = config.shard_dim_names
    if not shard_dims:
        if config.dp_replicate_enabled:  # dp_replicate x tp (the resolver sends pure replication to DDP)
            return replicate_mesh(config)
        return None  # tensor parallelism alone: every parameter is already split or replicated by the plan
    # One dimension needs no flattening: use it directly (slicing a flattened name is deprecated).
    # cp and sp never come together (ParallelismConfig refuses it), so two dimensions are one of two pairs.
    flat = "dp_shard_sp" if "sp" in shard_dims else "dp_shard_cp"
    shard = shard_dims[0] if len(shard_dims) == 1 else flat
    if config.dp_replicate_enabled:
        return mesh[("dp_replicate", shard)]
    return mesh[shard] if len(shard_dims) == 1 else config.submesh(flat)
