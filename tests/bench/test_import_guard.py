"""`import accelerate` stays light, and the benchmark modules stay importable.

Structural checks only (what gets imported), never timings: speed lives in bench/.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

HEAVY_AT_IMPORT = [
    "torch",
    "numpy",
    "yaml",
    "safetensors",
    "deepspeed",
    "torch_xla",
    "tensorboard",
    "wandb",
    "mlflow",
    "psutil",
    "tqdm",
]
OPTIONAL_BACKENDS = ["deepspeed", "torch_xla", "tensorboard", "wandb", "mlflow"]


def _loaded_after(code: str, candidates: list[str]) -> list[str]:
    """Which of ``candidates`` (top-level names) are in sys.modules after ``code`` in a fresh python."""
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    loaded = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    return sorted(loaded & set(candidates))


def test_import_accelerate_pulls_in_no_heavy_module() -> None:
    assert _loaded_after("import accelerate", HEAVY_AT_IMPORT) == []


def test_accelerator_pulls_in_no_optional_backend() -> None:
    assert _loaded_after("from accelerate import Accelerator", OPTIONAL_BACKENDS) == []


BENCH_MODULES = [
    "startup",
    "step_overhead",
    "ddp_two_proc",
    "data_loading",
    "collectives",
    "checkpoint_io",
    "elastic",
    "run_all",
]


@pytest.mark.parametrize("name", BENCH_MODULES)
def test_bench_module_imports(name: str) -> None:
    module = importlib.import_module(f"bench.{name}")
    assert callable(getattr(module, "run", None) or getattr(module, "main", None))


def test_row_statistics_and_report(tmp_path: object) -> None:
    from bench.common import compare_row, format_markdown, format_table, skipped, speed_ratio

    row = compare_row(
        "step",
        "demo",
        [2.0, 2.0, 2.0],
        [2.0, 1.0, 4.0],
        combine=speed_ratio,
        compare="raw/acc time",
        op=">=",
        target=0.98,
    )
    assert (row.median, row.low, row.high) == (1.0, 0.5, 2.0)
    assert row.status == "pass"
    assert row.repeats == 3
    miss = compare_row("x", "y", [1.0], [2.0], combine=speed_ratio, compare="", op=">=", target=0.98)
    assert miss.status == "miss"
    skip = skipped("data", "loader", "no module named accelerate.data")
    assert skip.status == "skip"
    assert "not available: no module named accelerate.data" in format_table([row, miss, skip])
    assert format_markdown([row]).count("\n") == 2
    assert json.dumps(row.to_json())


def test_guarded_turns_a_failure_into_a_skip_row() -> None:
    from bench.common import guarded

    def broken() -> list:
        raise ImportError("No module named 'accelerate.launch'")

    (row,) = guarded("2-proc", "launch", broken)
    assert row.status == "skip"
    assert "accelerate.launch" in row.note


def test_accelerator_import_skips_hardware_only_configs() -> None:
    """`from accelerate import Accelerator` loads no hardware-only config classes (dozens of dataclasses)."""
    probe = (
        "import sys\nfrom accelerate import Accelerator\n"
        "print('accelerate.utils.hardware_dataclasses' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"
