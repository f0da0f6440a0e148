"""What mixture-of-experts layers and expert parallelism (``ep``) change in the memory estimate (no torch).

A MoE layer replaces the dense MLP with a router and ``num_experts`` gated MLPs; each token runs through
``experts_per_token`` (top-k) of them. Under ``ep`` (carved from ``dp_shard``, as
``ParallelismConfig(ep_size=N)`` runs it: ``backends/parallel/experts.py``):

* each rank keeps ``num_experts / ep`` experts of every MoE layer, and where several ranks hold the same
  experts (``dp_replicate x dp_shard > ep``) FSDP2 shards them over those replicas, so a rank holds
  ``1 / (dp_replicate x dp_shard)`` of the expert weights; the other weights are sharded as usual;
* FSDP gathers a decoder block without its experts (they are their own FSDP unit, gathered over the
  replicas only), so the gathered block is smaller;
* each routed (token, expert) pair travels to its expert's rank and back: the exchange's send and
  receive buffers (``tokens x top_k x hidden``), and the activations of the routed rows on the
  rank that runs them (as many rows as it sends, with an even router).
"""

from __future__ import annotations

from accelerate.planning.layout import RunLayout
from accelerate.planning.shapes import ModelShape

# Elements autograd saves per routed (token, expert) row besides the experts' inner width: the
# gathered input row and the weighted output (2h) in one process; under ep also the row received by
# the exchange and the output sent back (4h). Read off transformers' Qwen3-MoE experts' forward; the
# ep estimates are within 5% of measured peaks (tests/planning/test_validation_ep.py).
_ROW_HIDDEN = 2
_ROW_HIDDEN_EP = 4
# Per expert inner element: the gate/up output (2), the activation (1), their product (1).
_ROW_INNER = 4


def check_experts(model: ModelShape, layout: RunLayout) -> None:
    """Refuses ``ep`` for a model without experts, or whose experts do not divide over ``ep``.

    Raises:
        ValueError: naming ``ep``, the model's ``num_experts`` and the fix.
    """
    if layout.ep == 1:
        return
    if not model.is_moe:
        raise ValueError(
            f"RunLayout(ep={layout.ep}) splits the experts of mixture-of-experts layers, but {model.name} has "
            "none the estimate knows of (a config with num_experts / num_local_experts, a checkpoint with "
            "experts.* tensors, or a model whose experts follow ParallelismConfig's experts protocol); leave "
            "ep at 1."
        )
    if int(model.num_experts or 0) % layout.ep:
        raise ValueError(
            f"RunLayout(ep={layout.ep}): {model.name} has num_experts={model.num_experts}, which does not "
            f"divide over {layout.ep} ranks; use an ep that divides {model.num_experts}."
        )


def expert_split(model: ModelShape, layout: RunLayout) -> tuple[int, int]:
    """(the weights sharded as usual, this rank's expert weights) under ``ep``; ``(parameters, 0)`` without."""
    if layout.ep == 1 or not model.is_moe:
        return model.parameters, 0
    return model.parameters - model.expert_parameters, -(-model.expert_parameters // layout.data_parallel)


def layer_experts(model: ModelShape) -> int:
    """One MoE layer's expert weights (every layer a MoE layer)."""
    return model.expert_parameters // max(1, int(model.num_layers or 1))


def gathered_block(model: ModelShape, layout: RunLayout) -> int:
    """Parameters FSDP gathers at once for the largest block: without its experts under ``ep`` (they
    are ignored by the block's unit), or their local share when FSDP shards them over replicas."""
    if layout.ep == 1 or not model.is_moe:
        return model.largest_layer
    experts = layer_experts(model)
    replicas = layout.data_parallel > layout.ep
    return max(model.largest_layer - experts, 0) + (experts // layout.ep if replicas else 0)


def routed_per_token(model: ModelShape, layout: RunLayout) -> float:
    """Elements one token's MoE MLP saves for backward in one layer (its router's probabilities too)."""
    top_k = int(model.experts_per_token or 1)
    inner = int(model.moe_intermediate_size or model.intermediate_size or 0)
    hidden = int(model.hidden_size or 0)
    row = _ROW_INNER * inner + (_ROW_HIDDEN_EP if layout.ep > 1 else _ROW_HIDDEN) * hidden
    return top_k * row / layout.tp + 2 * int(model.num_experts or 0)


def exchange_buffers(model: ModelShape, layout: RunLayout, element: int) -> int:
    """Bytes of one layer's exchange in flight: the rows sent and the rows received."""
    if layout.ep == 1 or not model.is_moe:
        return 0
    rows = layout.tokens * int(model.experts_per_token or 1)
    return 2 * rows * int(model.hidden_size or 0) * element


def exchange_traffic(model: ModelShape, layout: RunLayout, element: int) -> float:
    """Bytes one rank sends per step in the exchanges: to and back, forward and backward, every layer;
    ``1 / ep`` of the rows stay on the rank."""
    if layout.ep == 1 or not model.is_moe:
        return 0.0
    rows = layout.tokens * int(model.experts_per_token or 1)
    per_layer = 4 * rows * int(model.hidden_size or 0) * element * (layout.ep - 1) / layout.ep
    return per_layer * int(model.num_layers or 0)
