"""The memory estimate as text (a per-rank table, the peak, whether it fits) and as JSON-ready data."""

from __future__ import annotations

from typing import Any

from accelerate.planning.estimate import MemoryEstimate, rank_span

COLUMNS = ("ranks", "parameters", "gradients", "optimizer states", "activations", "comm. buffers", "total")


_UNITS = ("bytes", "KB", "MB", "GB", "TB", "PB")


def convert_bytes(size: float) -> str:
    """``size`` in decimal units (a GB is 10**9 bytes, as ``--max_memory 80GB`` and GPU makers count).

    Example:
        >>> convert_bytes(80 * 10**9), convert_bytes(1536)
        ('80.0 GB', '1.54 KB')
    """
    for unit in _UNITS[:-1]:
        if abs(size) < 1000.0:
            return f"{round(size, 2)} {unit}"
        size /= 1000.0
    return f"{round(size, 2)} {_UNITS[-1]}"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in rows
    ]


def fit_line(estimate: MemoryEstimate, max_memory: int) -> str:
    """``fits in 80 GB with 12.3 GB to spare`` / ``does not fit in 80 GB: 4.1 GB over``."""
    limit = convert_bytes(max_memory)
    margin = max_memory - estimate.peak
    if margin >= 0:
        return f"fits in {limit} per rank, with {convert_bytes(margin)} to spare"
    return f"does not fit in {limit} per rank: {convert_bytes(-margin)} over"


def render(
    estimate: MemoryEstimate, max_memory: int | None = None, fitting: list[MemoryEstimate] | None = None
) -> str:
    """The text report: the layout, one row per group of ranks, the peak, and (with ``max_memory``)
    whether it fits and which layouts of the same world size do."""
    model, layout = estimate.model, estimate.layout
    lines = [
        f"Memory per rank for training `{model.name}` ({model.parameters / 1e9:.3g}B parameters)",
        f"  layout: {layout.describe()} on {layout.world_size} rank(s); precision {layout.mixed_precision}, "
        f"optimizer {layout.optimizer}, micro-batch {layout.micro_batch_size} x {layout.sequence_length} tokens"
        + (", activation checkpointing" if layout.activation_checkpointing else ""),
        "",
    ]
    rows = [list(COLUMNS)]
    for group in estimate.groups:
        memory = group.memory
        values = (memory.parameters, memory.gradients, memory.optimizer_states, memory.activations,
                  memory.communication_buffers, memory.total)  # fmt: skip
        rows.append([rank_span(group.ranks), *(convert_bytes(value) for value in values)])
    lines += _table(rows)
    cpu = max(group.memory.cpu for group in estimate.groups)
    lines += ["", f"Peak: {convert_bytes(estimate.peak)} on rank {estimate.peak_rank} (the most loaded rank)"]
    if cpu:
        lines.append(f"Host memory per rank (CPU offload): {convert_bytes(cpu)}")
    lines += [f"Note: {note}" for note in estimate.notes]
    if max_memory is not None:
        lines.append(
            ("Fits: " if estimate.fits(max_memory) else "Does not fit: ") + fit_line(estimate, max_memory)
        )
        lines += ["", f"Layouts of {layout.world_size} ranks that fit, least communication per step first:"]
        rows = [["layout", "peak per rank", "sent per rank per step"]]
        rows += [[fit.layout.describe(), convert_bytes(fit.peak), convert_bytes(fit.communication_per_step)]
                 for fit in fitting or []]  # fmt: skip
        lines += (
            _table(rows)
            if len(rows) > 1
            else ["  (none: add ranks, offload to CPU, or checkpoint activations)"]
        )
    return "\n".join(lines)


def as_data(estimate: MemoryEstimate, max_memory: int | None = None,
            fitting: list[MemoryEstimate] | None = None) -> dict[str, Any]:  # fmt: skip
    """What ``--json`` prints: :meth:`MemoryEstimate.to_dict` plus the verdict and the layouts that fit."""
    data = estimate.to_dict()
    if max_memory is not None:
        data["max_memory"] = max_memory
        data["fits"] = estimate.fits(max_memory)
        data["margin"] = max_memory - estimate.peak
        data["layouts_that_fit"] = [
            {"layout": fit.layout.describe(), "sizes": {n: getattr(fit.layout, n) for n in
             ("dp_replicate", "dp_shard", "tp", "cp")}, "zero_stage": fit.layout.zero_stage,
             "peak": fit.peak, "communication_per_step": fit.communication_per_step}
            for fit in fitting or []
        ]  # fmt: skip
    return data
