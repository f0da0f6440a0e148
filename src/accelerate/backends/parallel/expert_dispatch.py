"""Expert parallelism's token exchange: each token goes to the rank that holds its expert and back.

Each of the ``ep`` ranks of an expert group holds ``num_experts / ep`` consecutive experts of a layer
(rank ``r``: experts ``[r * E / ep, (r + 1) * E / ep)``) and reads its own batch. For every
(token, chosen expert) pair the router made, :func:`dispatch_to_experts`:

1. orders the pairs by expert, so those for rank ``r`` form the ``r``-th chunk;
2. exchanges how many pairs each rank sends each expert (one small ``all_to_all_single`` of counts,
   so every rank knows the split sizes of the exchange that follows);
3. sends the token vectors with a variable-split ``all_to_all_single``;
4. runs the local experts on what arrived (any number, zero included);
5. sends the outputs back with the reverse exchange, and sums them per token weighted by the router's
   weights (the combine a single process does).

Both exchanges are autograd-aware (:class:`_AllToAll`): the gradient of an all-to-all is the
all-to-all with the split sizes swapped, so the gradient of every token comes back to the rank that
routed it and the experts' weight gradients collect every rank's tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

# (tokens received, their local expert index) -> the experts' outputs, unweighted, one row per token.
LocalExperts = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` with split sizes along dim 0; backward is the same exchange reversed.

    Rows ``[sum(send[:j]), sum(send[:j + 1]))`` of this rank's input go to rank ``j``; its output holds
    ``recv[i]`` rows from each rank ``i`` in rank order. The adjoint returns each row's gradient along
    the same path backwards: the exchange of the output gradient with ``send`` and ``recv`` swapped.
    """

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, send: list[int], recv: list[int], group: Any) -> torch.Tensor:
        ctx.send, ctx.recv, ctx.group = send, recv, group
        return _exchange_raw(tensor, send, recv, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        return _exchange_raw(grad, ctx.recv, ctx.send, ctx.group), None, None, None


def _exchange_raw(tensor: torch.Tensor, send: list[int], recv: list[int], group: Any) -> torch.Tensor:
    tensor = tensor.contiguous()
    out = tensor.new_empty((sum(recv), *tensor.shape[1:]))
    dist.all_to_all_single(out, tensor, output_split_sizes=recv, input_split_sizes=send, group=group)
    return out


def all_to_all(tensor: torch.Tensor, send: list[int], recv: list[int], group: Any) -> torch.Tensor:
    """The autograd-aware variable-split exchange (``Function.apply`` is untyped in torch's stubs)."""
    out: torch.Tensor = _AllToAll.apply(tensor, send, recv, group)  # type: ignore[no-untyped-call]
    return out


def dispatch_to_experts(
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    *,
    num_experts: int,
    group: Any,
    local_experts: LocalExperts,
) -> torch.Tensor:
    """The mixture's output for this rank's tokens, with the experts spread over ``group``'s ranks.

    Args:
        hidden_states: ``(tokens, hidden)``, this rank's tokens.
        top_k_index: ``(tokens, k)``, the experts the router chose for each token (global indices).
        top_k_weights: ``(tokens, k)``, the router's weight for each choice.
        num_experts: the layer's number of experts (all ranks together).
        group: the expert group's process group (``ep`` ranks).
        local_experts: runs this rank's experts: ``(rows, hidden)`` and each row's local expert index
            -> ``(rows, hidden)``, unweighted.

    Returns:
        ``(tokens, hidden)``: ``sum_k weight_k * expert_k(token)``, as one process computes it.
    """
    ranks = int(dist.get_world_size(group))
    per_rank = num_experts // ranks
    tokens, k = top_k_index.shape
    flat = top_k_index.reshape(-1)
    # Stable: the pairs of one expert keep token order, so the result is the same on every run.
    order = torch.argsort(flat, stable=True)
    token_of = order // k
    counts = torch.bincount(flat, minlength=num_experts).to(torch.int64)
    got = torch.empty_like(counts)  # got[i * per_rank + e]: rows rank i sends my local expert e
    dist.all_to_all_single(got, counts, group=group)
    send = counts.view(ranks, per_rank).sum(1).tolist()
    recv = got.view(ranks, per_rank).sum(1).tolist()
    arrived = all_to_all(hidden_states[token_of], send, recv, group)
    local_index = torch.arange(per_rank, device=got.device).repeat(ranks).repeat_interleave(got)
    outputs = local_experts(arrived, local_index.to(hidden_states.device))
    if arrived.shape[0] == 0 and torch.is_grad_enabled() and arrived.requires_grad:
        # Every rank must run both exchanges' backward (they are collectives), even one whose experts got
        # no token: tie the outputs to the (empty) arrivals so the path always exists.
        outputs = outputs + arrived.sum() * 0
    back = all_to_all(outputs.to(hidden_states.dtype), recv, send, group)
    weights = top_k_weights.reshape(-1)[order].unsqueeze(-1)
    combined = torch.zeros_like(hidden_states)
    return combined.index_add(0, token_of, (back * weights).to(hidden_states.dtype))
