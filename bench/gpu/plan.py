"""What ``make gpu-check`` runs: the test areas (one pytest run each), the benchmark sides, the budgets.

Every area is a separate pytest invocation over explicit files / test ids, restricted to the tests
marked ``cuda`` (and not ``multi_gpu``), with a per-test timeout (pytest-timeout) and a wall-clock cap
for the whole invocation. The global budget keeps the whole check under 8 minutes (of 15 minutes of device time a task gets, start-up included, leaving room to rerun a failed area).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MEASURE = Path(__file__).resolve().parent / "measure.py"

# The whole check, areas and benchmark together (a device call allows 10 minutes, a task 15 in all;
# the machine takes minutes to start, and a failed area must leave time for its rerun).
GLOBAL_BUDGET_S = 480.0
# Kept back from the areas for the benchmark (both sides).
BENCH_RESERVE_S = 240.0
# An area is not started with less than this left (it would only time out).
MIN_AREA_S = 15.0
MARKER = "cuda and not multi_gpu"


@dataclasses.dataclass(frozen=True)
class Area:
    """One pytest invocation: ``targets`` (files or test ids), ``cap_s`` for the whole run, ``per_test_s``."""

    name: str
    title: str
    targets: tuple[str, ...]
    cap_s: float
    per_test_s: int = 120
    # Tests that need a package the GPU machine may lack (torchao): all of them skipping is reported
    # as "not exercised", never as passed, and does not fail the check.
    optional: bool = False


AREAS: tuple[Area, ...] = (
    Area("placement", "device placement", (
        "tests/state/test_cuda_placement.py",
        "tests/backends/test_cuda.py::test_cpu_flag_forces_cpu_even_with_gpu",
    ), cap_s=45),
    Area("precision", "fp16 loss scaling + bf16 autocast", (
        "tests/precision/test_cuda_precision.py",
        "tests/backends/test_cuda.py::test_single_gpu_training_matches_torch_amp",
    ), cap_s=60),
    Area("checkpoint", "save_state/load_state of CUDA tensors and RNG", (
        "tests/checkpointing/test_cuda_state.py",
    ), cap_s=45),
    Area("big_model", "dispatch_model / cpu_offload / disk offload GPU<->host", (
        "tests/big_modeling/test_cuda_big_model.py",
    ), cap_s=60),
    Area("bnb", "bitsandbytes 8/4-bit loading, disk offload, QLoRA (where installed)", (
        "tests/big_modeling/test_bnb_cuda.py",
    ), cap_s=60, optional=True),
    Area("oom_batch_size", "find_executable_batch_size on a real CUDA OOM", (
        "tests/utils/test_cuda_memory.py",
    ), cap_s=45),
    Area("fsdp_one_process", "FSDP2 in one process (+ CPU offload)", (
        "tests/backends/fsdp/test_cuda_fsdp.py",
        "tests/backends/fsdp/test_fsdp_launch.py::test_cpu_offload_is_accepted_on_a_gpu",
    ), cap_s=60),
    Area("fp8", "fp8: torchao float8 matmuls; Transformer Engine / MS-AMP where installed", (
        "tests/precision/fp8/test_cuda_fp8.py",
    ), cap_s=30, optional=True),
    Area("watchdog", "hang watchdog + NCCL flight recorder, one process", (
        "tests/diagnostics/test_cuda_watchdog.py",
    ), cap_s=45),
    Area("memory_estimate", "estimate-memory against torch.cuda.max_memory_allocated (dense step)", (
        "tests/planning/test_cuda_validation.py",
    ), cap_s=60),
    Area("cli", "`accelerate test` and `accelerate env` on the GPU", (
        "tests/commands/test_cuda_cli.py",
    ), cap_s=90, per_test_s=150),
    Area("two_process_gloo", "2 processes sharing the GPU over gloo (CUDA tensors)", (
        "tests/backends/test_cuda_gloo_two_proc.py",
    ), cap_s=90, per_test_s=150),
)  # fmt: skip

# What one GPU cannot exercise: listed in the summary, never counted as passed.
NOT_EXERCISED: tuple[tuple[str, str], ...] = (
    ("two_process_gloo", "NCCL with two ranks (two ranks cannot share one device under NCCL)"),
    ("fsdp_one_process", "multi-GPU FSDP (sharding across devices over NCCL)"),
    ("multi_gpu tests", "every test marked multi_gpu (tests/backends/test_cuda.py, test_fsdp_launch.py, "
                        "launch/test_hang_diagnosis.py, backends/parallel/test_cuda_context_parallel.py: "
                        "context parallelism needs 2 GPUs)"),
    ("fp8", "fp8 training itself: not implemented by this accelerate (refused with NotAvailableYetError)"),
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class BenchSide:
    """One side of the benchmark: ``ours`` (src/ first on the path) or ``upstream`` (the installed one)."""

    name: str
    cap_s: float


BENCH_SIDES: tuple[BenchSide, ...] = (BenchSide("ours", 115.0), BenchSide("upstream", 115.0))
BENCH_METRICS: tuple[tuple[str, str], ...] = (
    ("step_bf16", "bf16 training step of a ~100M-parameter transformer (ms/step)"),
    ("prepare_first_step", "prepare(model, optimizer) + first step (s)"),
    ("save_state", "save_state of that model + AdamW (s)"),
    ("load_state", "load_state of that checkpoint (s)"),
    ("save_state_1gb", "save_state of a 1.07 GB fp32 model + AdamW (3.2 GB), raw: torch.save + fsync (s)"),
    ("load_state_1gb", "load_state of that checkpoint, raw: torch.load + load_state_dict (s)"),
    ("load_checkpoint_and_dispatch", "load_checkpoint_and_dispatch of a 4-shard safetensors checkpoint (s)"),
)


def has_pytest_timeout() -> bool:
    return importlib.util.find_spec("pytest_timeout") is not None


def pytest_command(area: Area, out: Path, python: str = sys.executable) -> list[str]:
    """The exact pytest command of ``area``, writing ``junit-<name>.xml`` into ``out``."""
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", MARKER, "-rA"]
    cmd += [f"--junitxml={out / f'junit-{area.name}.xml'}"]
    if has_pytest_timeout():
        cmd += [f"--timeout={area.per_test_s}"]
    return cmd + list(area.targets)


def child_env(*, ours: bool) -> dict[str, str]:
    """The environment of a child: ours puts src/ (and the repo, for ``tests.*``) first on the path; the
    upstream side gets no PYTHONPATH at all, so ``import accelerate`` finds the installed package."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
    env.pop("PYTHONPATH", None)
    if ours:
        env["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{ROOT}"
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def bench_command(
    side: BenchSide, out_file: Path, *, device: str, tiny: bool, python: str = sys.executable
) -> list[str]:
    cmd = [python, str(MEASURE), "--side", side.name, "--device", device, "--out", str(out_file)]
    return cmd + (["--tiny"] if tiny else [])


def format_plan(out: Path, python: str = sys.executable, *, device: str = "cuda", tiny: bool = False) -> str:
    """The dry run: every area and benchmark, with its exact command, cap and environment."""
    ours_path = f"{ROOT / 'src'}{os.pathsep}{ROOT}"
    lines = [
        f"gpu-check plan (dry run): global budget {GLOBAL_BUDGET_S:.0f} s, of which {BENCH_RESERVE_S:.0f} s "
        f"kept for the benchmark; results in {out}",
        "first: torch.cuda.is_available() must be True, else one line and exit 2 (nothing is reported as passed)",
        "",
        f"test areas (each its own pytest run, -m '{MARKER}'; ACCELERATE_* variables are cleared):",
    ]
    if not has_pytest_timeout():
        lines.append("  (pytest-timeout is not installed here: no per-test timeout, only the area cap)")
    for i, area in enumerate(AREAS, 1):
        lines.append(
            f"  {i:2d}. {area.name}: {area.title} (cap {area.cap_s:.0f} s, {area.per_test_s} s per test)"
        )
        lines.append(f"      $ PYTHONPATH={ours_path} " + shlex.join(pytest_command(area, out, python)))
    lines += [
        "",
        "benchmark sides (one subprocess each; ours/raw and upstream/raw measured in the same process):",
    ]
    for side in BENCH_SIDES:
        env = f"PYTHONPATH={ours_path}" if side.name == "ours" else "env -u PYTHONPATH"
        lines.append(f"  - {side.name} (cap {side.cap_s:.0f} s)")
        cmd = bench_command(side, out / f"bench-{side.name}.jsonl", device=device, tiny=tiny, python=python)
        lines.append(f"      $ {env} " + shlex.join(cmd))
    lines += ["", "benchmark metrics:"] + [f"  - {name}: {text}" for name, text in BENCH_METRICS]
    lines += ["", "not exercised on one GPU (listed in the summary, never counted as passed):"]
    lines += [f"  - {text}" for _, text in NOT_EXERCISED]
    lines += ["", f"summary: stdout table + {out / 'summary.md'} + {out / 'summary.json'}"]
    return "\n".join(lines)
