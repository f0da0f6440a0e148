"""The per-rank memory of a training run, from the model's shape and the run's layout (no torch).

Each rank holds its share of five things. Parameters, optimizer states and communication buffers
persist; backward starts with every activation saved and frees them block by block as it makes the
gradients, so the step peaks at the persistent part plus the larger of activations and gradients:

* parameters: fp32 (the optimizer's master copy under mixed precision), split by tensor
  parallelism (all but the input embedding, which transformers' plans replicate) and, with
  FSDP / ZeRO-3, over the ``dp_shard x cp`` group;
* gradients: fp32, as the parameters, sharded from ZeRO-2 on;
* optimizer states: bytes per parameter from the optimizer (Adam 8, 8-bit Adam 2, SGD 0 or 4),
  sharded from ZeRO-1 on;
* activations: what autograd saves for backward, per token and per decoder block (measured on
  decoder blocks with SDPA attention: ``8h + 2kv + 4i`` elements plus a few per head and token, of
  which ``6h`` (the residual stream and the norms) are not split by tensor parallelism), plus the logits in fp32 (whole under tensor
  parallelism: the LM head's output is gathered); activation
  checkpointing keeps each block's input and one block's activations at a time; the loss's
  backward adds two fp32 copies of the logits (their gradient and the softmax's);
* communication buffers: with FSDP the gathered parameters of two blocks (the one that runs and the
  one prefetched) in the compute precision and one block's unsharded gradients; with DDP the
  gradient buckets (a second copy of the gradients); with tensor parallelism one all-reduced block
  output per block, held by the backend's asynchronous work (:func:`tp_forward_buffers`).

Mixture-of-experts layers and expert parallelism (``ep``: each rank's share of the experts, the
routed rows' activations, the exchange's buffers) are sized in :mod:`accelerate.planning.experts`.
CPU offload moves parameters, gradients and optimizer states to host memory (reported apart).
The figures are checked against measured peaks in ``tests/planning/test_validation.py``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from accelerate.planning.experts import (
    check_experts,
    exchange_buffers,
    exchange_traffic,
    expert_split,
    gathered_block,
    routed_per_token,
)
from accelerate.planning.layout import DIMS, OPTIMIZER_STATE_BYTES, RunLayout
from accelerate.planning.shapes import ModelShape
from accelerate.planning.stages import in_flight, stage_layers, stage_parameters

_FP32 = 4
# DeepSpeed's stage3_max_live_parameters default: ZeRO-3 keeps up to this many parameters gathered.
_DEEPSPEED_LIVE = 1_000_000_000


@dataclass(frozen=True)
class RankMemory:
    """Bytes one rank needs on its accelerator (``cpu``: host memory, with CPU offload)."""

    parameters: int
    gradients: int
    optimizer_states: int
    activations: int
    communication_buffers: int
    cpu: int = 0

    @property
    def total(self) -> int:
        """The step's peak: backward frees each block's activations as it makes its gradients, so only
        the larger of the two counts on top of what persists."""
        persistent = self.parameters + self.optimizer_states + self.communication_buffers
        return persistent + max(self.activations, self.gradients)


@dataclass(frozen=True)
class RankGroup:
    """Ranks that need the same memory (FSDP gives the first ranks of a shard group one more element)."""

    ranks: tuple[int, ...]
    memory: RankMemory


@dataclass(frozen=True)
class MemoryEstimate:
    """The estimate for one model and layout: each group of ranks, the peak, and the notes that qualify it."""

    model: ModelShape
    layout: RunLayout
    groups: tuple[RankGroup, ...]
    communication_per_step: int  # bytes each rank sends per optimizer step (for ranking layouts)
    notes: tuple[str, ...] = field(default=())

    @property
    def peak(self) -> int:
        """The most loaded rank's bytes."""
        return max(group.memory.total for group in self.groups)

    @property
    def peak_rank(self) -> int:
        return max(self.groups, key=lambda group: group.memory.total).ranks[0]

    def fits(self, max_memory: int) -> bool:
        return self.peak <= max_memory

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``: the model, the layout, each rank group, the peak."""
        return {
            "model": asdict(self.model),
            "layout": asdict(self.layout),
            "ranks": [
                {"ranks": rank_span(group.ranks), **asdict(group.memory), "total": group.memory.total}
                for group in self.groups
            ],  # fmt: skip
            "peak": self.peak,
            "peak_rank": self.peak_rank,
            "communication_per_step": self.communication_per_step,
            "notes": list(self.notes),
        }


def rank_span(ranks: tuple[int, ...]) -> str:
    """``0-7`` for a contiguous run, else the ranks listed (shortened past 8)."""
    if len(ranks) > 1 and ranks[-1] - ranks[0] == len(ranks) - 1:
        return f"{ranks[0]}-{ranks[-1]}"
    listed = ",".join(str(rank) for rank in ranks[:8])
    return listed + (f",... ({len(ranks)} ranks)" if len(ranks) > 8 else "")


def _compute_bytes(layout: RunLayout) -> int:
    return _FP32 if layout.mixed_precision == "no" else 2


def activation_bytes(model: ModelShape, layout: RunLayout, stage: int = 0) -> int:
    """Bytes autograd saves for backward on one rank of pipeline ``stage`` (0 when the model's
    dimensions are unknown): its blocks' activations for each micro-batch in flight, plus the
    embedding's output on the first stage and the final norm and logits on the last."""
    if not model.knows_activations or model.hidden_size is None or model.num_layers is None:
        return 0
    hidden = model.hidden_size
    layers = stage_layers(model.num_layers, layout.pp, stage)
    inner = model.intermediate_size or 4 * hidden
    heads = model.num_heads or 1
    # Per token, measured on Llama blocks under tp=2: the residual stream and both norms' saved
    # tensors stay whole (6h); the rotated queries, attention output, keys/values and the MLP split.
    # Sequence and context parallelism split the tokens instead (layout.tokens).
    whole = 6 * hidden + 2
    if model.is_moe:  # the routed rows' expert activations and the router's (planning/experts.py)
        split = (2 * hidden + 2 * model.kv_size + heads) / layout.tp + routed_per_token(model, layout)
    else:
        split = (2 * hidden + 2 * model.kv_size + 4 * inner + heads) / layout.tp
    block = whole + split
    per_token = block + layers * hidden if layout.activation_checkpointing else layers * block
    first, last = stage == 0, stage == layout.pp - 1
    per_token += (hidden if first else 0) + (2 * hidden + 5 if last else 0)  # embeddings' output, final norm
    element = _compute_bytes(layout)
    # The loss upcasts the logits to fp32 (a second copy when the head computes in half precision);
    # the start of backward adds their gradient and the softmax's, both fp32, for one micro-batch.
    # Tensor parallelism leaves the logits whole: transformers' plans gather the LM head's output.
    vocab = (model.vocab_size or 0) if last else 0
    saved_logits = vocab * (_FP32 + (0 if element == _FP32 else element))
    backward_logits = vocab * 2 * _FP32
    held = in_flight(layout, stage) * (per_token * element + saved_logits)
    return int(layout.tokens * (held + backward_logits))


def tp_local_parameters(model: ModelShape, layout: RunLayout) -> int:
    """One tensor-parallel rank's parameters: the blocks and the LM head split ``tp`` ways, the input
    embedding whole (transformers' tensor-parallel plans replicate it); the first pipeline stage's
    under ``pp`` (:func:`~accelerate.planning.stages.stage_parameters`)."""
    return stage_parameters(model, layout, 0)


def tp_forward_buffers(model: ModelShape, layout: RunLayout, stage: int = 0) -> int:
    """Tensor parallelism's all-reduced block outputs, counted as one ``tokens x hidden`` buffer per
    block still held when backward starts: a backend's asynchronous work holds each forward
    all-reduce's output until the thread that completes it lets go. On gloo (CPU) its worker thread
    lets go at once, and the measured peaks hold none: the tp=2 and dp_shard=2 x tp=2 validations
    land 5-6% over the estimate, within 1% without this term, which stays as a margin until a GPU
    run measures it. (An earlier measurement read the profiler's running count, which drifts, as
    none to four per block held.)"""
    if layout.tp == 1 or not model.knows_activations:
        return 0
    layers = stage_layers(int(model.num_layers or 0), layout.pp, stage)
    return layers * layout.tokens * int(model.hidden_size or 0) * _compute_bytes(layout)


def _communication(model: ModelShape, layout: RunLayout) -> int:
    """Bytes one rank sends per step: parameter gathers, gradient reductions, and the tensor-, context-,
    sequence- and pipeline-parallel traffic of its activations."""
    params = stage_parameters(model, layout, 0)
    element = _compute_bytes(layout)
    shard, replicate = layout.shard_group, layout.dp_replicate
    sent = exchange_traffic(model, layout, element)
    if layout.ep > 1:  # the experts: gathered and reduce-scattered over their replicas, apart
        params, mine = expert_split(model, layout)
        replicas = layout.data_parallel // layout.ep
        sent += 3 * mine * replicas * element * (replicas - 1) / replicas
    if layout.zero_stage == 3 and shard > 1:
        sent += 3 * params * element * (shard - 1) / shard  # gather for forward and backward, reduce-scatter
    elif shard > 1:
        sent += (
            2 * params * element * (shard - 1) / shard
        )  # ZeRO-1/2's reduce-scatter + gather, or an all-reduce
    if replicate > 1:
        kept = params / shard if layout.zero_stage >= 2 else params
        sent += 2 * kept * element * (replicate - 1) / replicate
    tokens, passes = layout.tokens, layout.microbatches
    hidden = model.hidden_size or 0
    layers = stage_layers(model.num_layers or 0, layout.pp, 0)
    if layout.tp > 1:  # two all-reduces per block forward, two backward
        sent += passes * 4 * layers * 2 * tokens * hidden * element * (layout.tp - 1) / layout.tp
    if layout.cp > 1:  # ring attention passes keys and values round the ring, forward and backward
        sent += passes * 2 * layers * 2 * tokens * model.kv_size * element * (layout.cp - 1)
    if layout.sp > 1:  # Ulysses: all-to-alls of q, k, v and the attention output, forward and backward
        sent += (
            passes
            * 2
            * layers
            * (2 * hidden + 2 * model.kv_size)
            * tokens
            * element
            * (layout.sp - 1)
            / layout.sp
        )
    if layout.pp > 1:  # each micro-batch's activations forward to the next stage, their gradients back
        sent += passes * 2 * tokens * hidden * element
    return int(sent)


def _buffers(model: ModelShape, layout: RunLayout, whole: int, gradients: int, stage: int) -> int:
    """The communication buffers of one rank (see the module docstring)."""
    element = _compute_bytes(layout)
    block = -(-gathered_block(model, layout) // layout.tp)
    buffers = exchange_buffers(model, layout, element)
    if _deepspeed(layout):
        # DeepSpeed allocates its gradient bucket at full size whatever the model's: reduce_bucket_size
        # elements, fp32 under ZeRO-1 (it accumulates there), the parameters' precision from ZeRO-2 on.
        buffers += layout.zero_bucket_size * (_FP32 if layout.zero_stage == 1 else element)
        if layout.zero_stage == 3:
            # ZeRO-3 keeps gathered the parameters it will reuse within stage3_max_reuse_distance (1e9
            # by default, up to stage3_max_live_parameters, 1e9): when backward starts, the whole model
            # (measured); and its flat gradient partition stays allocated between steps.
            buffers += min(whole, _DEEPSPEED_LIVE) * element + gradients
    elif layout.zero_stage >= 1 and layout.shard_group > 1:  # FSDP: gathered blocks, one block's gradients
        buffers += (2 * block * element if layout.zero_stage == 3 else 0) + block * _FP32
    elif layout.data_parallel > 1:
        # DDP's buckets: a second copy of the gradients, allocated when the model is wrapped. The buckets
        # (the first 1 MB, then bucket_cap_mb each) split the gradients, so together they hold them all,
        # whatever the cap. With gradient_as_bucket_view the gradients are views into them, which saves
        # the gradients' copy only after backward's start, not at the peak counted here (both measured
        # within 0.1% on 2 processes: tests/planning/test_validation_ddp.py).
        buffers += gradients
    buffers += tp_forward_buffers(model, layout, stage)
    hidden = model.hidden_size or 0
    if layout.pp > 1:  # the activation received from the previous stage and the one sent on
        buffers += 2 * layout.tokens * hidden * element
    if layout.sp > 1:  # one block's all-to-all outputs (q, k, v, attention output), re-split by heads
        buffers += layout.tokens * (2 * hidden + 2 * model.kv_size) * element
    return buffers


def _deepspeed(layout: RunLayout) -> bool:
    return layout.engine == "deepspeed" and layout.zero_stage >= 1 and layout.shard_group > 1


def _rank_memory(model: ModelShape, layout: RunLayout, shard_params: int, stage: int) -> RankMemory:
    whole = stage_parameters(model, layout, stage)
    parameters = (shard_params if layout.zero_stage >= 3 else whole) * _FP32
    if _deepspeed(layout):
        # DeepSpeed holds the parameters in the compute precision and, apart, an fp32 master copy of
        # this rank's partition (even when the compute precision is fp32).
        held = shard_params if layout.zero_stage >= 3 else whole
        parameters = held * _compute_bytes(layout) + shard_params * _FP32
    gradients = (shard_params if layout.zero_stage >= 2 else whole) * _FP32
    optimizer = int(
        (shard_params if layout.zero_stage >= 1 else whole) * OPTIMIZER_STATE_BYTES[layout.optimizer]
    )
    buffers = _buffers(model, layout, whole, gradients, stage)
    activations = activation_bytes(model, layout, stage)
    if layout.cpu_offload:
        return RankMemory(0, 0, 0, activations, buffers, cpu=parameters + gradients + optimizer)
    return RankMemory(parameters, gradients, optimizer, activations, buffers)


def _coordinates(rank: int, layout: RunLayout) -> dict[str, int]:
    """``rank``'s place along each dimension, row-major in ``ParallelismConfig``'s order."""
    coords: dict[str, int] = {}
    for dim in reversed(DIMS):
        size = int(getattr(layout, dim) or 1)
        coords[dim], rank = rank % size, rank // size
    return coords


def estimate_memory(model: ModelShape, layout: RunLayout) -> MemoryEstimate:
    """Each rank's memory for training ``model`` with ``layout`` (see the module docstring for the model).

    Example:
        >>> from accelerate.planning.shapes import shape_from_config
        >>> shape = shape_from_config({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        ...     "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256})
        >>> plan = estimate_memory(shape, RunLayout(world_size=16, tp=2, mixed_precision="bf16",
        ...     micro_batch_size=4, sequence_length=4096))
        >>> plan.fits(80 * 10**9), round(plan.peak / 1e9)  # the logits alone take 29 GB
        (False, 103)
    """
    layout = layout.resolved()
    check_experts(model, layout)
    shard = layout.shard_group if layout.zero_stage >= 1 else 1
    split = {stage: divmod(stage_parameters(model, layout, stage), shard) for stage in range(layout.pp)}
    dense, experts = expert_split(model, layout)
    if experts:  # ep (no tp or pp with it): the other weights split over dp_shard, the experts apart
        base, extra = divmod(dense, shard)
        split = {0: (base + experts, extra)}
    by_memory: dict[RankMemory, list[int]] = {}
    memo: dict[tuple[int, bool], RankMemory] = {}
    for rank in range(layout.world_size):
        # The rank's index in its shard group is its (dp_shard, cp, sp) coordinate; the first `extra`
        # shards of an uneven split hold one element more.
        coords = _coordinates(rank, layout)
        index = (coords["dp_shard"] * layout.cp + coords["cp"]) * layout.sp + coords["sp"]
        stage = coords["pp"]
        base, extra = split[stage]
        key = (stage, index < extra)
        if key not in memo:
            memo[key] = _rank_memory(model, layout, base + (1 if index < extra else 0), stage)
        by_memory.setdefault(memo[key], []).append(rank)
    groups = tuple(RankGroup(tuple(ranks), memory) for memory, ranks in by_memory.items())
    notes = []
    if not model.knows_activations:
        notes.append("activations not counted: the model's hidden size and layer count are unknown")
    if _deepspeed(layout):
        notes.append(
            f"DeepSpeed's gradient bucket counted at zero_bucket_size={layout.zero_bucket_size:,} elements "
            '(its reduce_bucket_size: 500,000,000 unless the config sets it; accelerate fills "auto" with '
            "hidden_size**2)"
        )
    if layout.pp > 1:
        notes.append(
            "pp: each rank holds its stage's weights only (the whole model is built on every rank and "
            "traced at the first batch, then the other stages' weights are freed: the model must fit "
            "in host memory until then)"
        )
    if layout.ep > 1:
        notes.append(
            f"ep={layout.ep}: each rank holds {model.num_experts // layout.ep if model.num_experts else '?'} of "
            f"{model.num_experts} experts per layer, FSDP-sharded over the {layout.data_parallel // layout.ep} "
            "ranks holding the same ones; the router assumed even"
        )
    if layout.mixed_precision == "fp8":
        notes.append("fp8: activations counted at 2 bytes (the matmul inputs in fp8 save less)")
    return MemoryEstimate(model, layout, groups, _communication(model, layout), tuple(notes))
