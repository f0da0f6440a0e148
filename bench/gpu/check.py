"""``make gpu-check``: every CUDA test area and the GPU benchmark in one call, then one summary.

    python3 bench/gpu/check.py --out gpu-check-out        # the real run (needs a CUDA GPU)
    GPU_CHECK_DRY=1 python3 bench/gpu/check.py            # the plan and the exact commands; exit 0

Without a CUDA GPU the real run prints one line and exits 2: nothing is run, nothing reported as
passed. Exit code 1 when any area failed, timed out or was not started, or the benchmark erred.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.gpu import plan, report

NO_GPU_EXIT = 2


def run_capped(
    cmd: list[str], env: dict[str, str], cap_s: float, log: Path
) -> tuple[int | None, bool, float]:
    """Runs ``cmd`` (output to ``log``) for at most ``cap_s``; kills its whole process group after.

    Returns (exit code or None, timed out, seconds).
    """
    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=plan.ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            code: int | None = proc.wait(timeout=max(cap_s, 1.0))
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out, code = True, None
            _kill_group(proc)
    return code, timed_out, time.perf_counter() - start


def _kill_group(proc: subprocess.Popen[Any]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def cuda_present() -> tuple[bool, str]:
    """(True, device name) when torch sees a CUDA GPU, else (False, why not)."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - no torch is no GPU check either
        return False, f"torch cannot be imported ({type(exc).__name__}: {exc})"
    if not torch.cuda.is_available():
        return False, f"torch.cuda.is_available() is False (torch {torch.__version__})"
    return True, torch.cuda.get_device_name(0)


def environment(device_name: str) -> dict[str, Any]:
    import torch

    return {
        "device_name": device_name,
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "when_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def run_areas(out: Path, deadline: float, python: str, only: list[str] | None) -> list[report.AreaResult]:
    results = []
    env = plan.child_env(ours=True)
    for area in plan.AREAS:
        if only and area.name not in only:
            continue
        left = deadline - time.perf_counter()
        if left < plan.MIN_AREA_S:
            result = report.AreaResult(
                area.name, area.title, note=f"not started: global budget spent ({left:.0f} s left)"
            )
        else:
            print(f"gpu-check: area {area.name} (cap {min(area.cap_s, left):.0f} s) ...", flush=True)
            junit = out / f"junit-{area.name}.xml"
            junit.unlink(missing_ok=True)
            code, timed_out, took = run_capped(plan.pytest_command(area, out, python), env,
                                               min(area.cap_s, left), out / f"pytest-{area.name}.log")  # fmt: skip
            result = report.area_from_junit(area.name, area.title, junit, seconds=took, returncode=code,
                                            timed_out=timed_out, optional=area.optional)  # fmt: skip
            print(f"  {area.name}: {result.passed} passed, {result.failed} failed, {result.skipped} skipped "
                  f"{result.note} ({took:.0f} s)", flush=True)  # fmt: skip
        result.not_exercised = [text for name, text in plan.NOT_EXERCISED if name == area.name]
        if result.unexercised:
            result.not_exercised += [f"all skipped: {skip}" for skip in result.skips[:3]]
        results.append(result)
    return results


def run_bench(
    out: Path, deadline: float, python: str, device: str, tiny: bool
) -> dict[str, list[dict[str, Any]]]:
    sides: dict[str, list[dict[str, Any]]] = {}
    for side in plan.BENCH_SIDES:
        file = out / f"bench-{side.name}.jsonl"
        file.unlink(missing_ok=True)
        cap = min(side.cap_s, deadline - time.perf_counter())
        if cap < 10:
            sides[side.name] = [
                {"status": "error", "metric": "*", "reason": "not started: global budget spent"}
            ]
            continue
        print(f"gpu-check: benchmark, {side.name} side (cap {cap:.0f} s) ...", flush=True)
        cmd = plan.bench_command(side, file, device=device, tiny=tiny, python=python)
        code, timed_out, took = run_capped(cmd, plan.child_env(ours=side.name == "ours"), cap,
                                           out / f"bench-{side.name}.log")  # fmt: skip
        rows = report.read_jsonl(file)
        if timed_out or code != 0:
            why = f"timed out after {took:.0f} s" if timed_out else f"exit code {code}"
            rows.append({"status": "error", "metric": "*", "reason": f"{why}; see bench-{side.name}.log"})
        sides[side.name] = rows
    return sides


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="CUDA test areas + GPU benchmark, one summary")
    parser.add_argument("--out", type=Path, default=plan.ROOT / "gpu-check-out")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan and exit 0 (also GPU_CHECK_DRY=1)"
    )
    parser.add_argument("--budget", type=float, default=plan.GLOBAL_BUDGET_S, help="global budget, seconds")
    parser.add_argument("--areas", nargs="*", help="only these areas (default: all)")
    parser.add_argument("--no-bench", action="store_true", help="skip the benchmark")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    python = sys.executable
    if args.dry_run or os.environ.get("GPU_CHECK_DRY", "") not in ("", "0"):
        print(plan.format_plan(out, python))
        return 0
    ok, device_name = cuda_present()
    if not ok:
        print(f"gpu-check: no CUDA GPU is present: {device_name}; nothing was run.")
        return NO_GPU_EXIT
    start = time.perf_counter()
    deadline = start + args.budget
    out.mkdir(parents=True, exist_ok=True)
    env_info = environment(device_name)
    print(
        f"gpu-check on {device_name}, torch {env_info['torch']}, budget {args.budget:.0f} s; out: {out}",
        flush=True,
    )
    reserve = 0.0 if args.no_bench else plan.BENCH_RESERVE_S
    areas = run_areas(out, deadline - reserve, python, args.areas)
    sides = {} if args.no_bench else run_bench(out, deadline, python, "cuda", tiny=False)
    return finish(out, areas, sides, env_info, time.perf_counter() - start)


def finish(out: Path, areas: list[report.AreaResult], sides: dict[str, list[dict[str, Any]]],
           env_info: dict[str, Any], seconds: float) -> int:  # fmt: skip
    """Prints the summary table, writes summary.md / summary.json; the exit code (0 only when all passed)."""
    bench = report.bench_rows(plan.BENCH_METRICS, report.bench_cells(sides.get("ours", [])),
                              report.bench_cells(sides.get("upstream", [])))  # fmt: skip
    versions = {side: next((r.get("accelerate_version") for r in rows if r.get("accelerate_version")), None)
                for side, rows in sides.items()}  # fmt: skip
    env_info = {**env_info, "accelerate_versions": versions, "seconds": round(seconds, 1)}
    header = (f"gpu-check on {env_info.get('device_name')}, torch {env_info.get('torch')}, "
              f"{env_info.get('when_utc')}, {seconds:.0f} s; accelerate versions: "
              + ", ".join(f"{k} {v or 'not available'}" for k, v in versions.items()))  # fmt: skip
    errors = report.bench_errors(sides) if sides else []
    text = report.write_summary(
        out, header, areas, bench, [t for _, t in plan.NOT_EXERCISED], errors, env_info
    )
    print(text, flush=True)
    return 0 if report.overall_ok(areas, errors) else 1


if __name__ == "__main__":
    sys.exit(main())
