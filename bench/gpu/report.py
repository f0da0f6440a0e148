"""The summary of ``make gpu-check``: exact counts from each area's junit xml, the benchmark rows, one table.

An area passes only when its pytest run ended, its junit file was written, nothing failed or errored
and at least one test passed; an area that timed out, wrote no junit, or was not started for lack of
time counts as failed. Skips are counted apart and never as passed.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class AreaResult:
    name: str
    title: str = ""
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    not_exercised: list[str] = dataclasses.field(default_factory=list)
    note: str = ""  # why the area failed without a test failing (timeout, no junit, not started)
    failures: list[str] = dataclasses.field(default_factory=list)  # test ids that failed or errored
    skips: list[str] = dataclasses.field(default_factory=list)  # "test id: reason"
    unexercised: bool = False  # an optional area whose tests all skipped: neither passed nor failed

    @property
    def ok(self) -> bool:
        return not self.note and self.failed == 0 and (self.passed > 0 or self.unexercised)


def parse_junit(path: Path) -> tuple[int, int, int, list[str], list[str]]:
    """(passed, failed, skipped, failed ids, "id: reason" of skips) from a pytest junit xml file.

    Errors (setup/teardown) count as failed. Counted from the test cases, not the suite attributes,
    so a test that fails in its call and errors in its teardown is one failure.
    """
    root = ET.parse(path).getroot()
    passed = failed = skipped = 0
    failures: list[str] = []
    skips: list[str] = []
    for case in root.iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            failures.append(test_id)
        elif (skip := case.find("skipped")) is not None:
            skipped += 1
            skips.append(f"{test_id}: {skip.get('message', '')}")
        else:
            passed += 1
    return passed, failed, skipped, failures, skips


def area_from_junit(name: str, title: str, path: Path, *, seconds: float, returncode: int | None,
                    timed_out: bool, optional: bool = False) -> AreaResult:  # fmt: skip
    result = AreaResult(name, title, seconds=round(seconds, 1))
    if timed_out:
        result.note = f"timed out after {seconds:.0f} s"
    if not path.is_file():
        result.note = result.note or f"no junit written (pytest exit code {returncode})"
        return result
    try:
        result.passed, result.failed, result.skipped, result.failures, result.skips = parse_junit(path)
    except ET.ParseError as exc:
        result.note = result.note or f"unreadable junit: {exc}"
        return result
    if not result.note and returncode not in (0, None) and result.failed == 0:
        result.note = f"pytest exit code {returncode}"
    if not result.note and result.passed == 0 and result.failed == 0:
        if optional and result.skipped > 0:
            result.unexercised = True  # listed under "not exercised" with the skip reasons
        else:
            result.note = "no test passed (all skipped or none collected)"
    return result


@dataclasses.dataclass
class BenchCell:
    median: float | None = None
    ratio_to_raw: float | None = None
    unit: str = ""
    note: str = ""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


def bench_cells(rows: Iterable[dict[str, Any]]) -> dict[str, BenchCell]:
    """metric -> its cell for one side; a side that was not available gives one ``"*"`` cell."""
    cells: dict[str, BenchCell] = {}
    for row in rows:
        if row.get("status") == "not available":
            cells["*"] = BenchCell(note=f"not available: {row.get('reason', '')}")
            continue
        metric = str(row.get("metric"))
        if row.get("status") == "error":
            cells[metric] = BenchCell(note=f"error: {row.get('reason', '')}")
            continue
        cells[metric] = BenchCell(row.get("median"), row.get("ratio_to_raw"), row.get("unit", ""))
    return cells


def _num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"


def _cell(cells: dict[str, BenchCell], metric: str) -> BenchCell:
    return cells.get(metric) or cells.get("*") or BenchCell(note="not measured")


def summary_rows(areas: Sequence[AreaResult]) -> list[list[str]]:
    rows = [["area", "passed", "failed", "skipped", "not exercised", "seconds"]]
    for a in areas:
        failed = str(a.failed) + (f" ({a.note})" if a.note else "")
        rows.append([a.name, str(a.passed), failed, str(a.skipped), "; ".join(a.not_exercised) or "-",
                     f"{a.seconds:.0f}"])  # fmt: skip
    return rows


def bench_rows(
    metrics: Sequence[tuple[str, str]], ours: dict[str, BenchCell], upstream: dict[str, BenchCell]
) -> list[list[str]]:
    rows = [["metric", "ours", "upstream", "ours/raw", "upstream/raw"]]
    for metric, _ in metrics:
        o, u = _cell(ours, metric), _cell(upstream, metric)
        rows.append([
            metric,
            f"{_num(o.median)} {o.unit}".strip() if o.median is not None else o.note,
            f"{_num(u.median)} {u.unit}".strip() if u.median is not None else u.note,
            _num(o.ratio_to_raw), _num(u.ratio_to_raw),
        ])  # fmt: skip
    return rows


def markdown_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def text_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    out.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(out)


def overall_ok(areas: Sequence[AreaResult], bench_errors: Sequence[str]) -> bool:
    return all(a.ok for a in areas) and not bench_errors


def bench_errors(sides: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Errors of the benchmark (a side that was not available is not one; ours must always be)."""
    errors = []
    for side, rows in sides.items():
        if not rows:
            errors.append(f"{side}: no results")
        for row in rows:
            if row.get("status") == "error":
                errors.append(f"{side} {row.get('metric')}: {row.get('reason')}")
            if row.get("status") == "not available" and side == "ours":
                errors.append(f"ours: not available: {row.get('reason')}")
    return errors


def write_summary(out: Path, header: str, areas: Sequence[AreaResult], bench: list[list[str]],
                  not_exercised: Sequence[str], errors: Sequence[str], environment: dict[str, Any]) -> str:  # fmt: skip
    """Writes summary.md and summary.json into ``out``; returns the text table printed to stdout."""
    area_table = summary_rows(areas)
    text = "\n\n".join([header, text_table(area_table), text_table(bench)])
    text += "\n\nnot exercised on one GPU (not counted as passed):\n" + "\n".join(
        f"  - {n}" for n in not_exercised
    )
    for area in areas:
        for failure in area.failures:
            text += f"\nFAILED {area.name}: {failure}"
    text += "".join(f"\nBENCH ERROR {e}" for e in errors)
    ok = overall_ok(areas, errors)
    text += f"\n\nRESULT: {'all areas passed' if ok else 'FAILED'}"
    md = f"# gpu-check\n\n{header}\n\n{markdown_table(area_table)}\n\n{markdown_table(bench)}\n\n"
    md += "Not exercised on one GPU (not counted as passed):\n\n" + "".join(f"- {n}\n" for n in not_exercised)
    md += f"\nResult: {'all areas passed' if ok else 'FAILED'}\n"
    (out / "summary.md").write_text(md)
    data = {
        "ok": ok,
        "environment": environment,
        "areas": [dataclasses.asdict(a) | {"ok": a.ok} for a in areas],
        "bench": [dict(zip(bench[0], row)) for row in bench[1:]],
        "bench_errors": list(errors),
        "not_exercised": list(not_exercised),
    }
    (out / "summary.json").write_text(json.dumps(data, indent=2) + "\n")
    return text


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))
