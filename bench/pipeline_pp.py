"""Pipeline-parallel training: a hand-written ``torch.distributed.pipelining`` loop vs ``pp_size=2``.

``bench/_workers/pipeline_worker.py`` (4 MLP blocks of width 256, batch 16 in 4 micro-batches, AdamW,
1F1B; gloo, one thread per process): both loops in the same 2 torchrun processes, alternating step
by step. CPU seconds per optimizer step, ranks averaged; ratio raw time / accelerate time (>= 0.95).
An info row races ours against the raw loop that also does what ours promises on top, the batch's
mean loss sent from the last stage to every rank each step: the same work, so the two rows apart
show what that broadcast costs. Then one info row per schedule: the bubble counted from the schedule's own action table (torch's
``pipeline_order`` for the prepared model: per rank, one computation or an idle slot per time step),
idle slots over all slots of all ranks (:func:`bubble_of`). torch's tables give a forward and a
backward one slot each; the textbook (p - 1) / (m + p - 1) = 0.2 here counts a backward as one
forward too but no slots for the hand-over between stages. A measured share of waiting (1 - CPU /
wall) read mostly the load of a shared machine, so it is not reported.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import WORKERS_DIR, Row, guarded, main_for, run_worker, step_time_row, torchrun_cmd

BENCH = "pipeline-pp"
WORKER = WORKERS_DIR / "pipeline_worker.py"
SCHEDULES = ("GPipe", "1F1B", "Interleaved1F1B")
# What each computation waits for: the same micro-batch's forward on the stage before, its backward
# on the stage after (and its own forward); a weight gradient waits for the input gradient. The other
# actions in torch's tables (gradient reduction, sends, FSDP's unshard) take no time slot here.
_KIND = {"FORWARD": "F", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "B", "BACKWARD_WEIGHT": "W"}


def _needs(kind: str, stage: int, micro: int, last: int) -> list[tuple[str, int, int]]:
    if kind == "F":
        return [("F", stage - 1, micro)] if stage > 0 else []
    if kind == "B":
        return [("F", stage, micro)] + ([("B", stage + 1, micro)] if stage < last else [])
    return [("B", stage, micro)]


def _numbered(actions: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """A rank's computations, each micro-batch numbered by its order on its stage: every schedule runs
    a stage's micro-batches in order, and torch 2.13's 1F1B table numbers the last stage's forwards
    from 1 (its runtime, which does not read the table, runs 0 first)."""
    seen: dict[tuple[str, int], int] = {}
    out = []
    for name, stage, _ in actions:
        if name in _KIND:
            key = (_KIND[name], stage)
            seen[key] = seen.get(key, -1) + 1
            out.append((key[0], stage, seen[key]))
    return out


def bubble_of(table: dict[str, list[tuple[str, int, int]]]) -> float:
    """The idle share of a step, from a schedule's action table (rank -> its actions in order, each
    (computation type name, stage, micro-batch)), every computation one time slot long.

    Each rank runs its actions in its order, each as soon as what it waits for has run in an earlier
    slot; the step lasts until the last one, and the bubble is the idle slots over all slots of all
    ranks. torch's tables for GPipe and 1F1B keep only the order (their idle slots are dropped when
    torch adds the gradient reductions), so the slots are recounted here for every schedule alike.

    Example (GPipe, 2 stages, 2 micro-batches: 2 idle slots of 6 on each rank):
        >>> rank0 = [("FORWARD", 0, 0), ("FORWARD", 0, 1), ("FULL_BACKWARD", 0, 0), ("FULL_BACKWARD", 0, 1)]
        >>> rank1 = [("FORWARD", 1, 0), ("FORWARD", 1, 1), ("FULL_BACKWARD", 1, 0), ("FULL_BACKWARD", 1, 1)]
        >>> round(bubble_of({"0": rank0, "1": rank1}), 3)
        0.333
    """
    queues = [_numbered(actions) for actions in table.values()]
    last = max((s for q in queues for _, s, _ in q), default=0)
    busy = sum(len(q) for q in queues)
    done: set[tuple[str, int, int]] = set()
    slots = 0
    while any(queues):
        ready = [q for q in queues if q and all(need in done for need in _needs(*q[0], last))]
        if not ready:
            raise ValueError(f"the action table deadlocks at slot {slots}: {[q[:1] for q in queues]}")
        done.update(q.pop(0) for q in ready)  # after the slot: a dependant runs in a later one
        slots += 1
    return (slots * len(queues) - busy) / (slots * len(queues)) if slots else 0.0


def _rows() -> list[Row]:
    import torch.distributed.pipelining  # noqa: F401  (torch's pipeline schedules must exist)

    results, _ = run_worker(torchrun_cmd(WORKER, 2), timeout=600)
    row = step_time_row(
        BENCH, "steps/s, pp=2 1F1B, 2 procs (torch.distributed.pipelining loop vs Accelerator)",
        [r["raw"] for r in results], [r["accel"] for r in results],
    )  # fmt: skip
    row.target = 0.95
    same = step_time_row(
        BENCH, "the same, the raw loop also sending the mean loss to every rank as ours does (the same work)",
        [r["raw_same"] for r in results], [r["accel_same"] for r in results],
    )  # fmt: skip
    same.target = None
    same.note = "ours against the raw loop doing the same work: the row above less the loss broadcast's cost"
    rows = [row, same]
    for schedule in SCHEDULES:
        share = bubble_of(results[0][f"actions {schedule}"])  # every rank builds the whole table
        rows.append(Row(BENCH, f"pipeline bubble, {schedule}, pp=2, 4 micro-batches", unit="idle share of slots",
                        accel=share, median=share, low=share, high=share, stat="ratio", compare="action table", repeats=1))  # fmt: skip
    return rows


def run() -> list[Row]:
    return guarded(BENCH, "hand-written torch.distributed.pipelining loop vs Accelerator(pp_size=2)", _rows)


if __name__ == "__main__":
    main_for(BENCH, run)
