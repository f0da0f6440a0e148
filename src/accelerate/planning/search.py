"""The layouts of a world size that fit in a memory budget, least communication first."""

from __future__ import annotations

import dataclasses

from accelerate.planning.estimate import MemoryEstimate, estimate_memory
from accelerate.planning.layout import RunLayout
from accelerate.planning.shapes import ModelShape

# Tensor parallelism beyond one machine's 8 GPUs pays inter-node latency on every block.
MAX_TP = 8


def _divisors(number: int) -> list[int]:
    return [d for d in range(1, number + 1) if number % d == 0]


def candidate_layouts(model: ModelShape, layout: RunLayout) -> list[RunLayout]:
    """Every (dp_replicate, dp_shard, tp) split of ``layout.world_size`` (its cp, pp and sp kept) that the model
    allows: tp at most 8 and dividing the attention heads; the training choices of ``layout`` kept (with its
    ``ep``, the splits whose dp_shard it divides, without tp).

    A ``zero_stage`` of 0 in ``layout`` becomes FSDP where ``dp_shard > 1``, as ``dp_shard`` means.
    """
    found = []
    kept = layout.cp * layout.pp * layout.sp
    if layout.world_size % kept:
        raise ValueError(
            f"cp={layout.cp} x pp={layout.pp} x sp={layout.sp} does not divide world_size={layout.world_size}."
        )
    # The engine the layout names (DeepSpeed when it gives a ZeRO stage), kept for every candidate.
    engine = layout.engine or ("deepspeed" if layout.zero_stage else "fsdp")
    rest = layout.world_size // kept
    # sp and ep do not compose with tp; ep is carved from dp_shard, which it must divide.
    for tp in _divisors(rest) if layout.sp == 1 and layout.ep == 1 else [1]:
        if tp > MAX_TP or (model.num_heads and model.num_heads % tp):
            continue
        for replicate in _divisors(rest // tp):
            shard = rest // tp // replicate
            if shard % layout.ep:
                continue
            stage = layout.zero_stage if layout.zero_stage or shard == 1 else 3
            found.append(dataclasses.replace(layout, tp=tp, dp_replicate=replicate, dp_shard=shard, engine=engine,
                                             zero_stage=stage if shard > 1 else 0))  # fmt: skip
    return found


def layouts_that_fit(model: ModelShape, layout: RunLayout, max_memory: int) -> list[MemoryEstimate]:
    """The estimates of the candidate layouts whose most loaded rank fits in ``max_memory`` bytes,
    sorted by the bytes each rank sends per step (then by peak memory).

    Example:
        >>> from accelerate.planning.shapes import ModelShape
        >>> shape = ModelShape("m", 10**9, 10**7, hidden_size=2048, num_layers=16, num_heads=16)
        >>> fits = layouts_that_fit(shape, RunLayout(world_size=8), 40 * 10**9)
        >>> [fit.layout.describe() for fit in fits[:2]]
        ['tp=8', 'dp_replicate=2 x tp=4']
    """
    estimates = [estimate_memory(model, candidate) for candidate in candidate_layouts(model, layout)]
    fitting = [estimate for estimate in estimates if estimate.fits(max_memory)]
    return sorted(fitting, key=lambda estimate: (estimate.communication_per_step, estimate.peak))
