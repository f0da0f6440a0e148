"""`make gpu-check` on a machine without a GPU: the dry run, the no-GPU refusal, the junit/summary logic
and the benchmark core in its tiny CPU mode. The GPU run itself needs a lent GPU machine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from bench.gpu import check, measure, plan, report

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "bench" / "gpu" / "check.py"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "GPU_CHECK"))}
    return {**env, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", **extra}


def test_dry_run_prints_every_area_and_bench_with_its_command(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(CHECK), "--out", str(tmp_path / "o")], env=_env(GPU_CHECK_DRY="1"),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for area in plan.AREAS:
        assert f"{area.name}: {area.title}" in out
        assert all(target in out for target in area.targets)
        assert f"junit-{area.name}.xml" in out
    for side in plan.BENCH_SIDES:
        assert f"--side {side.name} --device cuda" in out
    assert all(name in out for name, _ in plan.BENCH_METRICS)
    assert all(text in out for _, text in plan.NOT_EXERCISED)
    assert not (tmp_path / "o").exists()  # a dry run writes nothing


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_without_cuda_the_real_run_exits_non_zero_with_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(CHECK), "--out", str(tmp_path / "o")], env=_env(),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == check.NO_GPU_EXIT
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-check: no CUDA GPU is present"), lines
    assert not (tmp_path / "o").exists()


def test_every_cuda_marked_test_file_belongs_to_an_area() -> None:
    targets = {t.split("::")[0] for area in plan.AREAS for t in area.targets}
    assert all((ROOT / t).is_file() for t in targets), sorted(t for t in targets if not (ROOT / t).is_file())
    marked = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        text = path.read_text()
        single = re.search(r"pytest\.mark\.cuda\b", text)
        if single:
            marked.add(str(path.relative_to(ROOT)))
    assert marked <= targets, sorted(marked - targets)


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5">
<testcase classname="tests.a" name="test_ok" time="0.1"/>
<testcase classname="tests.a" name="test_ok2" time="0.1"/>
<testcase classname="tests.a" name="test_bad" time="0.1"><failure message="assert 1 == 2">x</failure></testcase>
<testcase classname="tests.b" name="test_err" time="0.1"><error message="fixture">y</error></testcase>
<testcase classname="tests.b" name="test_skip" time="0.0"><skipped message="torchao is not installed"/></testcase>
</testsuite></testsuites>
"""


def test_junit_counts_are_exact_and_failures_fail_the_summary(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    passed, failed, skipped, failures, skips = report.parse_junit(path)
    assert (passed, failed, skipped) == (2, 2, 1)
    assert failures == ["tests.a::test_bad", "tests.b::test_err"]
    assert skips == ["tests.b::test_skip: torchao is not installed"]
    area = report.area_from_junit("x", "X", path, seconds=3.0, returncode=1, timed_out=False)
    assert not area.ok and area.note == ""
    missing = report.area_from_junit(
        "y", "Y", tmp_path / "none.xml", seconds=90, returncode=None, timed_out=True
    )
    assert not missing.ok and "timed out" in missing.note
    (tmp_path / "skips.xml").write_text(JUNIT.split("<testcase")[0] + '<testcase classname="c" name="t">'
                                        '<skipped message="m"/></testcase></testsuite></testsuites>')  # fmt: skip
    only_skips = report.area_from_junit(
        "z", "Z", tmp_path / "skips.xml", seconds=1, returncode=0, timed_out=False
    )
    assert not only_skips.ok and only_skips.skipped == 1  # a skipped area is never a passed one
    optional = report.area_from_junit(
        "fp8", "F", tmp_path / "skips.xml", seconds=1, returncode=0, timed_out=False, optional=True
    )
    # An optional area whose package is absent: not exercised (no failure), and never counted as passed.
    assert optional.ok and optional.unexercised and optional.passed == 0 and not optional.note


def test_summary_table_files_and_exit_code(tmp_path: Path) -> None:
    good = tmp_path / "good.xml"
    good.write_text(JUNIT.replace('<failure message="assert 1 == 2">x</failure>', "").replace(
        '<error message="fixture">y</error>', ""))  # fmt: skip
    areas = [report.area_from_junit("placement", "p", good, seconds=2, returncode=0, timed_out=False)]
    areas[0].not_exercised = ["NCCL with two ranks"]
    row = {"side": "ours", "metric": "step_bf16", "status": "ok", "median": 12.5, "ratio_to_raw": 1.01,
           "unit": "ms/step", "accelerate_version": "1.15.0"}  # fmt: skip
    sides = {
        "ours": [row],
        "upstream": [{"side": "upstream", "status": "not available", "reason": "no module"}],
    }
    env = {"device_name": "Fake GPU", "torch": "2.x", "when_utc": "now"}
    assert check.finish(tmp_path, areas, sides, env, 10.0) == 0
    text = (tmp_path / "summary.md").read_text()
    assert "| placement | 4 | 0 | 1 | NCCL with two ranks | 2 |" in text
    assert "| step_bf16 | 12.5 ms/step | not available: no module | 1.01 | - |" in text
    data = json.loads((tmp_path / "summary.json").read_text())
    assert (
        data["ok"]
        and data["areas"][0]["passed"] == 4
        and data["environment"]["accelerate_versions"]["ours"] == "1.15.0"
    )
    areas.append(report.AreaResult("cli", note="not started: global budget spent"))
    assert check.finish(tmp_path, areas, sides, env, 10.0) == 1
    assert json.loads((tmp_path / "summary.json").read_text())["ok"] is False


def test_bench_core_tiny_on_cpu_writes_well_formed_rows_for_ours(tmp_path: Path) -> None:
    out = tmp_path / "ours.jsonl"
    cmd = plan.bench_command(plan.BENCH_SIDES[0], out, device="cpu", tiny=True)
    proc = subprocess.run(cmd, env=plan.child_env(ours=True), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = report.read_jsonl(out)
    assert [r["metric"] for r in rows] == [
        "step_bf16", "save_state", "load_state", "save_state_1gb", "load_state_1gb", "prepare_first_step",
        "load_checkpoint_and_dispatch"]  # fmt: skip
    for row in rows:
        assert row["status"] == "ok", row
        assert (
            row["side"] == "ours"
            and row["device_name"] == "cpu"
            and row["torch_version"] == torch.__version__
        )
        assert row["accelerate_file"].startswith(str(ROOT / "src"))
        assert row["median"] > 0 and row["raw_median"] > 0 and row["ratio_to_raw"] > 0
        assert len(row["samples"]) == row["repeats"] == len(row["raw_samples"])
    assert not report.bench_errors({"ours": rows})
    cells = report.bench_cells(rows)
    assert set(cells) == {name for name, _ in plan.BENCH_METRICS}


def test_upstream_side_is_not_available_when_only_ours_imports(tmp_path: Path) -> None:
    # Here `import accelerate` finds this repository's package (src/ or an editable install), never
    # upstream's: that side is reported "not available", which is not an error.
    out = tmp_path / "upstream.jsonl"
    assert measure.main(["--side", "upstream", "--device", "cpu", "--tiny", "--out", str(out)]) == 0
    (row,) = report.read_jsonl(out)
    assert row["status"] == "not available" and "this repository's" in row["reason"]
    assert row["side"] == "upstream" and row["torch_version"] == torch.__version__
    assert report.bench_errors({"upstream": [row]}) == []
    cell = report.bench_cells([row])["*"]
    assert cell.note.startswith("not available")
