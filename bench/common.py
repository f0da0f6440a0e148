"""Shared pieces of the benchmarks: paired measurements, ratio statistics, the table, the files.

Every benchmark measures the same work twice, once with raw PyTorch and once through accelerate,
in the same run: one warm-up pair, then repeats that alternate which side goes first, so drift in
the machine's load hits both sides alike. Each repeat gives one ratio; a row reports their median,
min and max, oriented so that its target reads naturally (">= 0.98" means "at least 98% as fast").
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
WORKERS_DIR = BENCH_DIR / "_workers"
VENV_BIN = Path(sys.executable).parent


@dataclasses.dataclass
class Row:
    """One line of the table: a metric measured both ways and compared against its target.

    ``stat`` is ``"ratio"`` (a dimensionless ratio) or ``"delta"`` (accelerate minus raw, in
    ``unit``); ``compare`` says how it was formed, e.g. ``"raw/acc time"``.
    """

    bench: str
    metric: str
    unit: str = ""
    raw: float | None = None
    accel: float | None = None
    stat: str = "ratio"
    compare: str = ""
    median: float | None = None
    low: float | None = None
    high: float | None = None
    op: str = ">="
    target: float | None = None
    note: str = ""
    repeats: int = 0

    @property
    def status(self) -> str:
        if self.median is None:
            return "skip"
        if self.target is None:
            return "info"  # measured, shown for context, judged elsewhere
        ok = self.median >= self.target if self.op == ">=" else self.median <= self.target
        return "pass" if ok else "miss"

    def target_text(self) -> str:
        if self.target is None:
            return ""
        if self.stat == "delta":
            return f"{self.op} +{self.target:g} {self.unit}"
        return f"{self.op} {self.target:g}"

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["status"] = self.status
        data["target_text"] = self.target_text()
        return data


# A row whose benchmark broke (not a missing dependency): run_all exits non-zero on one, so a broken
# worker is seen at once instead of reading as "not available" in the table.
FAILED = "FAILED: "


def skipped(bench: str, metric: str, reason: str) -> Row:
    """A row for a measurement that could not run (a missing dependency, a failed launch)."""
    return Row(bench=bench, metric=metric, note=f"not available: {reason}")


# --------------------------------------------------------------------------- pairs and statistics
@dataclasses.dataclass
class Pairs:
    """Index-aligned measurements of the raw and the accelerate side."""

    raw: list[float]
    accel: list[float]


def run_pairs(
    raw: Callable[[], float], accel: Callable[[], float], *, repeats: int, warmup: int = 1
) -> Pairs:
    """Runs ``warmup`` discarded pairs, then ``repeats`` pairs, alternating which side goes first."""
    for _ in range(warmup):
        raw()
        accel()
    out = Pairs([], [])
    for i in range(repeats):
        if i % 2 == 0:
            r = raw()
            a = accel()
        else:
            a = accel()
            r = raw()
        out.raw.append(r)
        out.accel.append(a)
    return out


def compare_row(
    bench: str,
    metric: str,
    raw: Sequence[float],
    accel: Sequence[float],
    *,
    combine: Callable[[float, float], float],
    compare: str,
    op: str,
    target: float,
    unit: str = "",
    scale: float = 1.0,
    stat: str = "ratio",
    note: str = "",
) -> Row:
    """Builds a row from aligned measurements; ``combine(raw, accel)`` gives one pair's statistic.

    ``raw``/``accel`` shown in the row are medians, multiplied by ``scale`` (e.g. 1000 for ms).
    """
    values = [combine(r, a) for r, a in zip(raw, accel, strict=True)]
    if not values:
        return skipped(bench, metric, "no measurements")
    return Row(
        bench=bench,
        metric=metric,
        unit=unit,
        raw=statistics.median(raw) * scale,
        accel=statistics.median(accel) * scale,
        stat=stat,
        compare=compare,
        median=statistics.median(values),
        low=min(values),
        high=max(values),
        op=op,
        target=target,
        note=note,
        repeats=len(values),
    )


def seconds_row(
    bench: str,
    metric: str,
    pair: Mapping[str, Sequence[float]],
    *,
    op: str,
    target: float,
    compare: str = "",
    note: str = "",
) -> Row:
    """The row of a worker's timed pair (``{"raw": [s, ...], "accel": [s, ...]}``): ``op`` ``"<="``
    reads accelerate's time over raw's (at most ``target``), ``">="`` raw's over accelerate's."""
    combine = time_ratio if op == "<=" else speed_ratio
    compare = compare or ("acc/raw time" if op == "<=" else "raw/acc time")
    return compare_row(
        bench, metric, pair["raw"], pair["accel"], combine=combine, compare=compare, op=op, target=target,
        unit="s", note=note,
    )  # fmt: skip


def rank_mean(series: Sequence[Sequence[float]]) -> list[float]:
    """Each repeat's value averaged over the ranks (``series``: one list of repeats per rank)."""
    return [sum(values) / len(values) for values in zip(*series, strict=True)]


def step_time_row(
    bench: str,
    metric: str,
    raw: Sequence[Sequence[float]],
    accel: Sequence[Sequence[float]],
    target: float = 0.98,
) -> Row:
    """The row of a worker that raced a hand-written loop against Accelerator: CPU seconds per optimizer
    step per rank and repeat, ranks averaged; raw time / accelerate time, at least ``target``."""
    return compare_row(
        bench, metric, rank_mean(raw), rank_mean(accel), combine=speed_ratio, compare="raw/acc time", op=">=",
        target=target, unit="ms/opt step", scale=1000,
    )  # fmt: skip


def raced_row(
    bench: str,
    worker: Path,
    metric: str,
    *,
    procs: int = 2,
    args: Sequence[str] = (),
    target: float = 0.98,
    timeout: float = 600,
) -> Row:
    """Runs a worker built on ``bench/_workers/common.py``'s ``race`` under torchrun on ``procs``
    processes and makes its :func:`step_time_row`."""
    results, _ = run_worker(torchrun_cmd(worker, procs, *args), timeout=timeout)
    return step_time_row(bench, metric, [r["raw"] for r in results], [r["accel"] for r in results], target)


def speed_ratio(raw_time: float, accel_time: float) -> float:
    """Accelerate's speed relative to raw, from two times (>= 1 means accelerate is faster)."""
    return raw_time / accel_time


def time_ratio(raw_time: float, accel_time: float) -> float:
    """Accelerate's time relative to raw (<= 1 means accelerate is faster)."""
    return accel_time / raw_time


def rate_ratio(raw_rate: float, accel_rate: float) -> float:
    """Accelerate's throughput relative to raw (>= 1 means accelerate is faster)."""
    return accel_rate / raw_rate


# --------------------------------------------------------------------------- processes
def bench_env(**extra: str) -> dict[str, str]:
    """The environment for child processes: one thread each, src on the path, no stray launcher vars."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "TORCHELASTIC_"))}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env["OMP_NUM_THREADS"] = "1"
    # Measure what an installed package costs: from cached bytecode. This checkout may run with
    # PYTHONDONTWRITEBYTECODE, which would recompile accelerate's sources in every process; the cache
    # lives under the git-ignored results folder so that nothing is written next to the sources.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(RESULTS_DIR / "pycache")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def resource_children_cpu() -> float:
    """CPU seconds (user + system) used so far by this process's waited-for children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def child_cpu(
    cmd: Sequence[str], env: dict[str, str] | None = None, timeout: float = 120
) -> tuple[float, float]:
    """Runs ``cmd`` to completion; returns (CPU seconds of it and its children, wall seconds)."""
    before = resource_children_cpu()
    start = time.perf_counter()
    subprocess.run(
        cmd, env=env, check=True, timeout=timeout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    wall = time.perf_counter() - start
    return resource_children_cpu() - before, wall


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torchrun_cmd(script: Path, nproc: int, *args: str) -> list[str]:
    return [
        str(VENV_BIN / "torchrun"),
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(script),
        *args,
    ]


def accelerate_launch_cmd(script: Path, nproc: int, *args: str) -> list[str]:
    return [
        str(VENV_BIN / "accelerate"),
        "launch",
        "--cpu",
        "--num_processes",
        str(nproc),
        "--main_process_port",
        str(free_port()),
        str(script),
        *args,
    ]


def python_cmd(script: Path, *args: str) -> list[str]:
    return [sys.executable, str(script), *args]


@contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    """A temporary folder on the results disk, not /tmp (which may be memory-backed): fsync must reach
    a real disk."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=prefix, dir=RESULTS_DIR) as scratch:
        yield scratch


def run_worker(cmd: list[str], *, timeout: float = 120) -> tuple[list[dict[str, Any]], float]:
    """Runs a worker command that takes ``--out DIR``; returns each rank's JSON and the wall time.

    Workers write ``DIR/rank{N}.json``. A failing worker raises RuntimeError with its stderr tail.
    """
    with tempfile.TemporaryDirectory(prefix="accelerate-bench-") as out:
        start = time.time()
        proc = subprocess.run(
            [*cmd, "--out", out, "--t0", repr(start)],
            env=bench_env(),
            timeout=timeout,
            capture_output=True,
            text=True,
        )
        wall = time.time() - start
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout)[-2000:]
            raise RuntimeError(f"{Path(cmd[0]).name} exited with {proc.returncode}:\n{tail}")
        results = []
        for path in sorted(Path(out).glob("rank*.json")):
            results.append(json.loads(path.read_text()))
        if not results:
            raise RuntimeError(f"{' '.join(cmd[:3])} wrote no results")
        return results, wall


# --------------------------------------------------------------------------- the report
def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _stat_text(row: Row) -> str:
    if row.median is None:
        return "-"
    if row.stat == "delta":
        return f"{row.median:+.1f} [{row.low:+.1f}, {row.high:+.1f}] {row.unit}"
    return f"{row.median:.3f} [{row.low:.3f}, {row.high:.3f}]"


HEADER = ("bench", "metric", "raw", "accelerate", "unit", "compared", "median [min, max]", "target", "result")


def table_cells(rows: Sequence[Row]) -> list[tuple[str, ...]]:
    cells = []
    for row in rows:
        result = row.status if not row.note else f"{row.status} ({row.note})"
        cells.append(
            (
                row.bench,
                row.metric,
                _fmt(row.raw),
                _fmt(row.accel),
                row.unit,
                row.compare,
                _stat_text(row),
                row.target_text(),
                result,
            )
        )
    return cells


def format_table(rows: Sequence[Row]) -> str:
    """A plain-text table for the terminal."""
    cells = [HEADER, *table_cells(rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(HEADER))]
    lines = ["  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def format_markdown(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in line) + " |" for line in table_cells(rows)]
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch": torch_version,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_1m": round(load[0], 2),
    }


def machine_line(info: dict[str, Any]) -> str:
    return (
        f"{info['cpu']}, {info['cores']} cores, torch {info['torch']}, Python {info['python']}, "
        f"{info['date']}, load average {info['loadavg_1m']} at the end"
    )


def write_results(rows: Sequence[Row], name: str = "latest", seconds: float | None = None) -> Path:
    """Writes ``bench/results/{name}.json`` and ``{name}.md``; returns the JSON path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    if seconds is not None:
        info["total_seconds"] = round(seconds, 1)
    data = {"machine": info, "rows": [row.to_json() for row in rows]}
    json_path = RESULTS_DIR / f"{name}.json"
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    md = f"Measured on {machine_line(info)}.\n\n{format_markdown(rows)}\n"
    (RESULTS_DIR / f"{name}.md").write_text(md)
    return json_path


def guarded(bench: str, metric: str, make_rows: Callable[[], list[Row]]) -> list[Row]:
    """Runs ``make_rows``; a missing dependency or a failure becomes one skip row instead of a crash."""
    try:
        return make_rows()
    except ImportError as exc:
        return [skipped(bench, metric, f"{exc}")]
    except Exception as exc:  # a benchmark must never take the whole run down, nor fail quietly
        lines = [line for line in str(exc).strip().splitlines() if line.strip("=- ")]
        return [
            Row(
                bench=bench,
                metric=metric,
                note=f"{FAILED}{type(exc).__name__}: {lines[-1] if lines else ''}"[:200],
            )
        ]


def main_for(bench_name: str, run: Callable[[], list[Row]]) -> None:
    """Entry point of a benchmark run alone: runs it, prints its table, writes its result files."""
    start = time.perf_counter()
    rows = run()
    print(format_table(rows))
    path = write_results(rows, name=bench_name, seconds=time.perf_counter() - start)
    print(f"\n{bench_name}: {time.perf_counter() - start:.0f} s; results in {path.relative_to(ROOT)}")


def write_worker_result(out_dir: str, rank: int, data: dict[str, Any]) -> None:
    """Used by workers: writes this rank's JSON where the parent collects it."""
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(data))
