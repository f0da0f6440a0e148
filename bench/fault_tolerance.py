"""Fault-tolerant replicas (torchft): from a replica group's death to the survivors' next committed step.

Three replica groups (one CPU process each, loopback) train; one is SIGKILLed mid-step (after its
forward, while the others wait for its gradients). The time runs from the kill to the first step
the survivors commit without it: torchft's lighthouse drops the dead group once its heartbeats stop
(500 ms here), the survivors' skipped step is redrawn, and nothing restarts. The killed group then
restarts, heals from a peer (the heal time is in the note) and rejoins; the run checks that every
group ends equal to a reference. Beside it: our elastic re-formation after a node dies (``elastic.py``,
1 s x 3 heartbeat), which restarts every process. Goal: under a quarter of the elastic time.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Row, main_for
from bench.elastic import SHORT_HEARTBEAT, elastic_once

BENCH = "fault_tolerance"
REPEATS = 2


def ft_once() -> tuple[float, float]:
    from tests.backends.fault_tolerance.chaos import run

    with tempfile.TemporaryDirectory() as tmp:
        summary = run(Path(tmp), join_timeout_ms=100)  # start_lighthouse's default, as a user runs it
    if not (summary["groups_equal"] and summary["each_batch_once"] and summary["survivor_pids_unchanged"]):
        raise RuntimeError(f"fault-tolerance bench: the chaos run did not end clean: {summary}")
    return float(summary["kill_to_next_commit_s"]), float(summary["heal_s"])


def run() -> list[Row]:
    try:
        import torchft  # noqa: F401
    except ImportError as exc:
        return [Row(bench=BENCH, metric="replica group lost", note=f"not available: {exc}")]
    ft, heal, elastic = [], [], []
    for _ in range(REPEATS):
        recovery, healed = ft_once()
        ft.append(recovery)
        heal.append(healed)
        elastic.append(elastic_once(SHORT_HEARTBEAT))
    ratios = [f / e for f, e in zip(ft, elastic)]
    return [
        Row(
            bench=BENCH, unit="s", raw=statistics.median(elastic), accel=statistics.median(ft),
            metric="replica group killed mid-step: survivors' next committed step (3 groups, torchft) vs elastic re-formation",
            compare="ft/elastic time", median=statistics.median(ratios), low=min(ratios), high=max(ratios),
            op="<=", target=0.25, repeats=REPEATS,
            note=f"kill -> next committed step, no process restarts; heal of the restarted group {statistics.median(heal):.3f} s",
        )
    ]  # fmt: skip


if __name__ == "__main__":
    main_for(BENCH, run)
