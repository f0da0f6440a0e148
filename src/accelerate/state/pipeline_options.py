"""The pipeline-parallel fields of ``ParallelismConfig``, checked when the config is built.

``pp_size`` is a mesh dimension like the others; these are the settings only a pipeline has: the
schedule (named as torch.distributed.pipelining's classes), the micro-batches per batch, where the
model is cut, and the loss function the last stage runs inside the schedule. Pure data: nothing here
imports torch.
"""

from __future__ import annotations

from typing import Any

# The schedules a pipeline can run, by torch's class names (Schedule<name>), and their stages per rank.
PIPELINE_SCHEDULES = {"GPipe": 1, "1F1B": 1, "Interleaved1F1B": 2}
DEFAULT_SCHEDULE = "1F1B"


def check_pipeline_options(config: Any) -> None:
    """Fills the defaults of the ``pp_*`` fields of ``config`` and raises on values that cannot run.

    Raises:
        ValueError: an unknown schedule, a micro-batch count below 1, or split points that are
            neither ``"auto"`` nor a list of module names; each message names the field and the fix.
    """
    schedule = config.pp_schedule if config.pp_schedule is not None else DEFAULT_SCHEDULE
    if schedule not in PIPELINE_SCHEDULES:
        raise ValueError(
            f"ParallelismConfig(pp_schedule={schedule!r}) is not a pipeline schedule; use one of "
            f"{sorted(PIPELINE_SCHEDULES)} (torch.distributed.pipelining's Schedule<name> classes)."
        )
    config.pp_schedule = schedule
    chunks = config.pp_microbatches
    if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1):
        raise ValueError(
            f"ParallelismConfig(pp_microbatches={chunks!r}) must be an integer >= 1 (micro-batches per "
            "batch), or None for one per pipeline stage (pp_size)."
        )
    _check_schedule_fits(schedule, chunks, int(config.pp_size))
    points = config.pp_split_points if config.pp_split_points is not None else "auto"
    if points != "auto" and (
        isinstance(points, str)
        or not isinstance(points, list | tuple)
        or not all(isinstance(p, str) for p in points)
    ):
        raise ValueError(
            f"ParallelismConfig(pp_split_points={points!r}) must be 'auto' (balanced by parameter size) or "
            "a list of the module names that begin stages 1, 2, ... (e.g. ['layers.4'])."
        )
    config.pp_split_points = points if points == "auto" else list(points)
    if config.pp_loss_fn is not None and not callable(config.pp_loss_fn):
        raise ValueError(
            f"ParallelismConfig(pp_loss_fn={config.pp_loss_fn!r}) must be callable as "
            "loss_fn(output, labels) -> scalar loss tensor (e.g. torch.nn.functional.cross_entropy)."
        )


def _check_schedule_fits(schedule: str, chunks: int | None, pp_size: int) -> None:
    """torch's rules on micro-batch counts, checked before any process group forms."""
    if chunks is None or pp_size < 2:
        return
    if (
        schedule == "1F1B" and chunks < pp_size
    ):  # every stage must have one in flight before the first backward
        raise ValueError(
            f"ParallelismConfig(pp_schedule='1F1B', pp_microbatches={chunks}) needs at least pp_size={pp_size} "
            "micro-batches; raise pp_microbatches or use pp_schedule='GPipe'."
        )
    rounds = max(1, chunks // pp_size)
    if schedule == "Interleaved1F1B" and chunks % rounds:
        raise ValueError(
            f"ParallelismConfig(pp_schedule='Interleaved1F1B', pp_microbatches={chunks}) must be a multiple of "
            f"its rounds ({rounds}: pp_microbatches // pp_size={pp_size}); use a multiple of pp_size."
        )


def stages_per_rank(config: Any) -> int:
    """How many pipeline stages each rank of the ``pp`` dimension holds (2 for interleaved schedules)."""
    return PIPELINE_SCHEDULES[config.pp_schedule]


def microbatches(config: Any) -> int:
    """Micro-batches per batch: ``pp_microbatches``, else one per pipeline stage (``pp_size``)."""
    return int(config.pp_microbatches) if config.pp_microbatches is not None else int(config.pp_size)


def check_batch(config: Any, rows: int) -> None:
    """Raises ValueError when a batch of ``rows`` rows cannot be cut into the configured micro-batches."""
    chunks = microbatches(config)
    if rows % chunks:
        raise ValueError(
            f"A batch of {rows} rows cannot be cut into ParallelismConfig(pp_microbatches={chunks}) equal "
            f"micro-batches (pp_size={config.pp_size}). Use a batch size that is a multiple of {chunks}, or "
            "set pp_microbatches to a divisor of the batch size."
        )
