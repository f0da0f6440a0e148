"""N-D parallelism: tensor parallelism, FSDP2 / HSDP and replication composed on one device mesh.

``ParallelismConfig`` (``state/parallelism.py``) builds the named mesh once, dimensions
``dp_replicate x dp_shard x cp x sp x tp`` (those above 1) with the flattened sub-meshes ``dp``,
``dp_shard_cp`` and ``dp_cp``. The resolver picks :class:`ParallelStrategy` when the config shards
(``dp_shard``/``cp``) or splits tensors (``tp``); pure ``dp_replicate`` stays plain DDP.

The model is composed in torchtitan's fixed order, one small step per module:

``tp``: the user (or transformers' ``tp_plan="auto", device_mesh=accelerator.torch_device_mesh["tp"]``)
tensor-parallelises the model on the ``tp`` sub-mesh *before* ``prepare()``; prepare only checks that
a plan was applied (``tp_size > 1`` with no DTensor parameter on the tp mesh is an error saying how).
``activation``: activation checkpointing of the blocks the FSDP plugin names (on the TP'd blocks).
Compilation is the Accelerator's own step (``dynamo_plugin``): regional compilation runs before the
strategy, so between TP and FSDP, as torchtitan orders it. ``fsdp``: which mesh ``fully_shard``
runs over: ``dp_shard_cp``, or ``(dp_replicate, dp_shard_cp)`` for HSDP; then FSDP2 itself is
:class:`accelerate.backends.fsdp.strategy.FSDPStrategy` (blocks, root, mixed precision, optimizer
shards, ``no_sync``, global-norm clipping), reused rather than copied. ``strategy``: the composition.
``context``: ``maybe_context_parallel`` (CUDA only: torch's ring attention has no CPU kernel).
``ulysses`` and ``sequence``: sequence parallelism (``sp``, native Ulysses): before FSDP2, the model's
attention becomes an all-to-all exchange around unchanged attention, and its loss the whole
sequence's; the prepared loader gives each sp rank its slice of every sequence. FSDP2 shards over
``dp_shard x sp``.
``experts`` and ``expert_dispatch``: expert parallelism (``ep_size``, carved from ``dp_shard``, so no
mesh dimension of its own): before FSDP2, every experts module (the protocol in ``experts``) keeps
this rank's slice of its stacked weights (DTensors on an ``(ep_replicate, ep[, tp])`` mesh, replicated
over ``tp``, FSDP2 units of their own over ``ep_replicate`` when several ranks hold them) and its forward exchanges tokens by
all-to-all; the model's FSDP units ignore those weights.
``pipeline`` (``pp_size > 1``, instead of the steps above; with ``dp_replicate`` only): the model cut
into stages, trained by a ``torch.distributed.pipelining`` schedule (``pipeline_model``), checkpointed
stage by stage.

Checkpoints go through :class:`accelerate.backends.dtensor_io.ShardedCheckpointIO` (DCP folders, which reshard
on load across topologies). Nothing here is imported by ``import accelerate``.
"""

from accelerate._lazy import lazy_exports

_EXPORTS = {
    "ParallelStrategy": "accelerate.backends.parallel.strategy",
    "apply_expert_parallel": "accelerate.backends.parallel.experts",
    "check_tensor_parallel": "accelerate.backends.parallel.tp",
    "dispatch_to_experts": "accelerate.backends.parallel.expert_dispatch",
    "fsdp_mesh": "accelerate.backends.parallel.fsdp",
    "maybe_context_parallel": "accelerate.backends.parallel.context",
    "ulysses_attention": "accelerate.backends.parallel.ulysses",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
