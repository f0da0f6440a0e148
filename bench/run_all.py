"""``make bench``: every benchmark in one run, one table on stdout, JSON and Markdown beside it.

Writes bench/results/latest.json (every row plus the machine) and bench/results/latest.md (the
table as docs/benchmarks.md shows it; the README repeats it without the notes). Each benchmark
also runs alone: ``python bench/<name>.py``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (
    big_modeling,
    bnb_loading,
    checkpoint_io,
    checkpoint_large,
    collectives,
    data_loading,
    ddp_two_proc,
    deepspeed_zero2,
    elastic,
    expert_parallel,
    fault_tolerance,
    fp8_ao,
    fsdp_checkpoint,
    fsdp_two_proc,
    parallel_nd,
    pipeline_pp,
    sequence_parallel,
    startup,
    step_overhead,
)
from bench.common import FAILED, ROOT, Row, format_table, guarded, write_results

BENCHMARKS = [
    startup, step_overhead, ddp_two_proc, deepspeed_zero2, data_loading, collectives, checkpoint_io, checkpoint_large,
    big_modeling,
]  # fmt: skip
BENCHMARKS += [fsdp_two_proc, fsdp_checkpoint, bnb_loading, parallel_nd, expert_parallel, pipeline_pp]
BENCHMARKS += [sequence_parallel, fp8_ao, elastic, fault_tolerance]


def main() -> None:
    rows: list[Row] = []
    start = time.perf_counter()
    for module in BENCHMARKS:
        name = module.__name__.rsplit(".", 1)[-1]
        began = time.perf_counter()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows += guarded(name, "(whole benchmark)", module.run)
        print(f"  {name}: {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
    total = time.perf_counter() - start
    print(format_table(rows))
    path = write_results(rows, "latest", seconds=total)
    misses = [row for row in rows if row.status == "miss"]
    print(
        f"\n{len(rows)} rows, {len(misses)} missed target, in {total:.0f} s; {path.relative_to(ROOT)} and latest.md"
    )
    broken = [row for row in rows if row.note.startswith(FAILED)]
    if broken:
        sys.exit(
            "benchmarks that failed (not a missing dependency): " + ", ".join(row.bench for row in broken)
        )


if __name__ == "__main__":
    main()
