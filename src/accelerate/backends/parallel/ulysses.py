"""Sequence parallelism (Ulysses): attention over the whole sequence from ranks that each hold a slice.

Each rank of an ``sp`` group holds a slice of every sequence (``seq / sp`` tokens, all heads). Before
attention an all-to-all turns that into *the whole sequence for a slice of the heads*
(``heads / sp``); attention, which mixes tokens but never heads, runs unchanged on it; a second
all-to-all turns the output back. Everything else in the model (projections, MLPs, norms) works
token by token, so it runs on the slice as it is.

For transformers models (those that call ``scaled_dot_product_attention`` through the attention
interface) :func:`apply_ulysses` registers an attention function and switches the model to it. A
model of one's own calls :func:`ulysses_attention` in its attention module (the documented hook).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

# The name the transformers attention function is registered under (config._attn_implementation).
ATTENTION_NAME = "accelerate_ulysses"


class _AllToAll(torch.autograd.Function):
    """An equal-split ``all_to_all_single`` over dim 0; its gradient is the same exchange of the grads.

    Chunk ``j`` of rank ``i``'s input becomes chunk ``i`` of rank ``j``'s output, so the adjoint sends
    chunk ``i`` of rank ``j``'s output gradient back to chunk ``j`` of rank ``i``: the same exchange.
    """

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        tensor = tensor.contiguous()
        # Contiguous on both sides: all_to_all_single reads and writes the flat storage in dim-0 chunks
        # (empty_like would copy a transposed input's strides).
        out = torch.empty_like(tensor, memory_format=torch.contiguous_format)
        dist.all_to_all_single(out, tensor, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous()
        out = torch.empty_like(grad, memory_format=torch.contiguous_format)
        dist.all_to_all_single(out, grad, group=ctx.group)
        return out, None


def _exchange(tensor: torch.Tensor, group: Any) -> torch.Tensor:
    """The autograd-aware exchange (``Function.apply`` is untyped in torch's stubs)."""
    out: torch.Tensor = _AllToAll.apply(tensor, group)  # type: ignore[no-untyped-call]
    return out


def _size(group: Any) -> int:
    return int(dist.get_world_size(group))


def sequence_to_heads(tensor: torch.Tensor, group: Any) -> torch.Tensor:
    """``(batch, heads, seq / n, dim)`` on each of the ``n`` ranks -> ``(batch, heads / n, seq, dim)``.

    Rank ``r`` gets heads ``[r * heads / n, (r + 1) * heads / n)`` of every slice, slices in rank order.
    """
    n = _size(group)
    b, h, s, d = tensor.shape
    if h % n:
        raise ValueError(
            f"Ulysses sequence parallelism splits the attention heads over sp_size={n} ranks, but this attention "
            f"has {h} heads ({h} is not divisible by {n}). Use an sp_size that divides the number of heads."
        )
    # Chunk j (heads of rank j) first, so all_to_all_single sends it to rank j.
    send = tensor.reshape(b, n, h // n, s, d).transpose(0, 1)
    got = _exchange(send, group)  # got[i]: this rank's heads of rank i's slice
    return got.permute(1, 2, 0, 3, 4).reshape(b, h // n, n * s, d)


def heads_to_sequence(tensor: torch.Tensor, group: Any) -> torch.Tensor:
    """The inverse of :func:`sequence_to_heads`: ``(batch, heads / n, seq, dim)`` -> ``(batch, heads, seq / n, dim)``."""
    n = _size(group)
    b, h_local, s, d = tensor.shape
    send = tensor.reshape(b, h_local, n, s // n, d).permute(2, 0, 1, 3, 4)  # chunk j: slice j, my heads
    got = _exchange(send, group)  # got[i]: rank i's heads of my slice
    return got.transpose(0, 1).reshape(b, n * h_local, s // n, d)


def sequence_parallel_group() -> Any:
    """The current run's ``sp`` process group (its Accelerator's mesh), or None without one."""
    from accelerate.state.accelerator_state import existing_accelerator_state

    state = existing_accelerator_state()
    config = state.parallelism_config if state is not None else None
    if config is None or not config.sp_enabled or config.device_mesh is None:
        return None
    return config.device_mesh["sp"].get_group()


def ulysses_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    group: Any = None,
) -> torch.Tensor:
    """Runs ``attention`` over the whole sequence although this rank holds only its slice.

    The hook for an attention module of one's own under ``ParallelismConfig(sp_size=N)``: give the
    rank's ``(batch, heads, seq / N, head_dim)`` query/key/value (key/value may have fewer heads, as
    with grouped-query attention, if their count is still divisible by N) and a function that attends
    over ``(batch, heads / N, seq, head_dim)`` tensors (causal masking over the *whole* sequence is
    the function's job: ``is_causal=True`` does it). Returns ``(batch, heads, seq / N, head_dim)``.

    ``group`` defaults to the run's ``sp`` group; without sequence parallelism (no Accelerator, or
    ``sp_size`` 1) this is ``attention(query, key, value)``, so the module runs unchanged anywhere.

    Example:
        >>> from accelerate.utils import ulysses_attention
        >>> out = ulysses_attention(q, k, v, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    """
    group = group if group is not None else sequence_parallel_group()
    if group is None or _size(group) == 1:
        return attention(query, key, value)
    q, k, v = (sequence_to_heads(t, group) for t in (query, key, value))
    return heads_to_sequence(attention(q, k, v), group)


def _repeat_heads(tensor: torch.Tensor, times: int) -> torch.Tensor:
    """``(b, kv_heads, s, d)`` -> ``(b, kv_heads * times, s, d)``, each head repeated ``times`` in a row
    (grouped-query attention's layout: query head ``h`` reads key/value head ``h // times``)."""
    if times == 1:
        return tensor
    b, h, s, d = tensor.shape
    return tensor[:, :, None].expand(b, h, times, s, d).reshape(b, h * times, s, d)


def _transformers_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-interface signature: (b, heads, seq/n, d) in, (b, seq/n, heads, d) out.

    ``attention_mask`` is ignored: transformers built it for this rank's slice, while attention runs
    over the whole sequence, where ``is_causal`` masks (sliced batches have no padding, or padding on
    the right only, which no real token reads).
    """
    group = sequence_parallel_group()
    n = _size(group) if group is not None else 1
    if key.shape[1] % n:
        # Fewer key/value heads than ranks (grouped-query attention): repeat them first, so that each
        # rank's share of the query heads comes with the key/value heads they read.
        times = query.shape[1] // key.shape[1]
        key, value = _repeat_heads(key, times), _repeat_heads(value, times)
    is_causal = bool(getattr(module, "is_causal", True))

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        times = q.shape[1] // k.shape[1]
        k, v = _repeat_heads(k, times), _repeat_heads(v, times)
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout, scale=scaling, is_causal=is_causal and q.shape[2] > 1
        )

    return ulysses_attention(query, key, value, attend, group=group).transpose(1, 2).contiguous(), None


def apply_ulysses(model: torch.nn.Module, group: Any) -> None:
    """Switches a transformers model's attention to the Ulysses function over ``group``.

    A model that is not a transformers ``PreTrainedModel`` is left alone: its attention modules call
    :func:`ulysses_attention` themselves.

    Raises:
        ValueError: the model's attention heads are not divisible by the sp size (naming both).
    """
    set_impl = getattr(model, "set_attn_implementation", None)
    config = getattr(model, "config", None)
    if set_impl is None or config is None:
        return
    n = _size(group)
    heads = getattr(config, "num_attention_heads", None)
    if isinstance(heads, int) and heads % n:
        raise ValueError(
            f"ParallelismConfig(sp_size={n}) splits the attention heads over {n} ranks, but "
            f"{type(model).__name__} has num_attention_heads={heads}, not divisible by {n}. Use an sp_size that "
            f"divides {heads}."
        )
    causal = [m.is_causal for m in model.modules() if isinstance(getattr(m, "is_causal", None), bool)]
    if not all(causal):
        # The prepared loader shifts labels for next-token prediction, and attention masks causally.
        raise ValueError(
            f"ParallelismConfig(sp_size={n}) trains causal language models (labels shifted to the next token, "
            f"causal attention over the whole sequence), but {type(model).__name__} has non-causal attention "
            "(is_causal=False). Leave sp_size unset for this model."
        )
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, _transformers_attention)
    set_impl(ATTENTION_NAME)
