"""What one pipeline stage holds: its blocks' and end layers' parameters, and its micro-batches in flight.

Pipeline parallelism (``pp``) cuts the decoder blocks into ``pp`` stages of consecutive blocks (the
first stages take one more when they do not divide, as a balanced split does); the input embedding
lives on the first stage, the final norm and the LM head on the last. Each stage keeps the
activations of the micro-batches it has run forward and not yet backward: all of them under GPipe,
``pp - stage`` (at most the micro-batch count) under 1F1B, which is what lets the first stages fit.
Interleaved 1F1B is counted as 1F1B (its two half-size stages per rank hold about as much).
Tensor parallelism splits the blocks and the LM head, and keeps the input embedding whole
(transformers' tensor-parallel plans replicate it). Each rank keeps only its stages' weights: this
accelerate's pipeline frees the others once it has cut the model (at the first batch).
Pure arithmetic, no torch.
"""

from __future__ import annotations

from accelerate.planning.layout import RunLayout
from accelerate.planning.shapes import ModelShape


def _ceil(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def stage_layers(num_layers: int, pp: int, stage: int) -> int:
    """Decoder blocks on ``stage`` of ``pp``: an even split, the first stages taking the remainder.

    Example:
        >>> [stage_layers(10, 4, s) for s in range(4)]
        [3, 3, 2, 2]
    """
    base, extra = divmod(num_layers, pp)
    return base + (1 if stage < extra else 0)


def in_flight(layout: RunLayout, stage: int) -> int:
    """Micro-batches whose activations ``stage`` holds at once (1 without a pipeline)."""
    if layout.pp == 1:
        return 1
    if layout.pp_schedule == "GPipe":  # every forward first, then every backward
        return layout.microbatches
    return min(layout.pp - stage, layout.microbatches)


def _parts(model: ModelShape) -> tuple[int, int, int]:
    """(input embedding, all blocks, the rest: final norm and LM head) of the model's parameters."""
    embedding = min((model.vocab_size or 0) * (model.hidden_size or 0), model.parameters)
    blocks = model.largest_layer * (model.num_layers or 0)
    if not model.num_layers or blocks > model.parameters - embedding:
        blocks = model.parameters - embedding
    return embedding, blocks, model.parameters - embedding - blocks


def stage_parameters(model: ModelShape, layout: RunLayout, stage: int = 0) -> int:
    """One rank's parameters before data-parallel sharding: its stage's share, split by tensor parallelism.

    Example:
        >>> shape = ModelShape("m", 1000 + 8 * 100 + 1000, 100, hidden_size=10, num_layers=8, vocab_size=100)
        >>> [stage_parameters(shape, RunLayout(world_size=2, pp=2, dp_shard=1), s) for s in (0, 1)]
        [1400, 1400]
    """
    embedding, blocks, rest = _parts(model)
    if layout.pp == 1:
        return embedding + _ceil(blocks + rest, layout.tp)
    layers = model.num_layers or layout.pp
    here = _ceil(blocks * stage_layers(layers, layout.pp, stage), layers)
    local = _ceil(here, layout.tp)
    if stage == 0:
        local += embedding
    if stage == layout.pp - 1:
        local += _ceil(rest, layout.tp)
    return local
