"""Two processes: ``torchrun`` + raw DDP vs ``accelerate launch`` + ``Accelerator``.

Each launch runs ``bench/_workers/ddp_worker.py`` (MLP 512-512-10, batch 64 per rank, AdamW, gloo,
one thread per process). Launches alternate raw/accelerate after a warm-up process (page cache, bytecode).
- time to first step: wall seconds from starting the launcher to the end of the first optimizer
  step on the slower rank; ratio accelerate/raw (<= 1.02).
- steps/s: inside every launch, after its own first step, the worker also builds the other loop
  and the two alternate optimizer step by optimizer step (launch-to-launch noise here is several
  percent, far above the effect measured; the launcher cannot change the steady state beyond the
  environment, which is the same: one thread per process). CPU seconds per optimizer step, ranks
  averaged, accumulation 1 and 4; ratio raw time / accelerate time = accelerate's steps/s over
  raw's (>= 0.98).
"""

from __future__ import annotations

import shutil
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    VENV_BIN,
    WORKERS_DIR,
    Row,
    accelerate_launch_cmd,
    bench_env,
    child_cpu,
    compare_row,
    guarded,
    main_for,
    run_worker,
    skipped,
    speed_ratio,
    time_ratio,
    torchrun_cmd,
)

BENCH = "2-proc"
# Launch pairs. Within one launch the two loops keep a steady difference of their own (which model
# was built first, where its tensors landed): one launch's accumulation-4 ratio ranged 0.94-1.01 on
# an idle machine. More launches, not more steps per launch, narrow the row's median.
PAIRS = 5
WORKER = WORKERS_DIR / "ddp_worker.py"


def _launch(mode: str) -> list[dict]:
    if mode == "raw":
        cmd = torchrun_cmd(WORKER, 2, "--mode", "raw")
    else:
        cmd = accelerate_launch_cmd(WORKER, 2, "--mode", "accelerate")
    results, _ = run_worker(cmd, timeout=120)
    return results


def _slowest(results: list[dict], key: str) -> float:
    return max(r[key] for r in results)


def _rank_mean(results: list[dict], accum: int, side: str) -> list[float]:
    series = [r[f"accum{accum}"][side] for r in results]
    return [sum(values) / len(values) for values in zip(*series, strict=True)]


def _rows() -> list[Row]:
    if shutil.which("accelerate", path=str(VENV_BIN)) is None:
        return [skipped(BENCH, "torchrun+DDP vs accelerate launch", "no `accelerate` console script")]
    import accelerate.commands.launch  # noqa: F401  (the launcher must exist)

    # Warm-up, cheaper than a discarded launch: page cache and bytecode of everything both load.
    warm = "import torch, torch.distributed.run, torch.nn.parallel; import accelerate.commands.launch, accelerate.accelerator"
    child_cpu([sys.executable, "-c", warm], bench_env())
    launches: dict[str, list[list[dict]]] = {"raw": [], "accelerate": []}
    for i in range(PAIRS):
        for mode in ("raw", "accelerate") if i % 2 == 0 else ("accelerate", "raw"):
            launches[mode].append(_launch(mode))
    raw, accel = launches["raw"], launches["accelerate"]

    def breakdown(runs: list[list[dict]]) -> str:
        start = statistics.median(_slowest(r, "python_started_s") for r in runs)
        ready = statistics.median(_slowest(r, "ready_s") for r in runs)
        return f"{start:.2f}/{ready:.2f}"

    rows = [
        compare_row(
            BENCH,
            "time to first step (launcher start -> first optimizer step, slower rank)",
            [_slowest(r, "first_step_s") for r in raw],
            [_slowest(a, "first_step_s") for a in accel],
            combine=time_ratio,
            compare="acc/raw time",
            op="<=",
            target=1.02,
            unit="s",
            note=f"worker python up / set up at raw {breakdown(raw)} s, acc {breakdown(accel)} s",
        )
    ]
    for accum in (1, 4):
        # Every launch (of either launcher) alternates the two loops step by step.
        pooled_raw = [x for run in raw + accel for x in _rank_mean(run, accum, "raw")]
        pooled_accel = [x for run in raw + accel for x in _rank_mean(run, accum, "accel")]
        rows.append(
            compare_row(
                BENCH,
                f"steps/s, accumulation {accum} (CPU per optimizer step, loops alternating)",
                pooled_raw,
                pooled_accel,
                combine=speed_ratio,
                compare="raw/acc time",
                op=">=",
                target=0.98,
                unit="ms/opt step",
                scale=1000,
            )
        )
    return rows


def run() -> list[Row]:
    return guarded(BENCH, "torchrun + DDP vs accelerate launch + Accelerator", _rows)


if __name__ == "__main__":
    main_for(BENCH, run)
