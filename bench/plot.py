"""The benchmark page's plots, drawn from its own tables: ``python bench/plot.py`` (``make bench-plots``).

docs/benchmarks.md is the record of the latest measurements (its CPU table is the README's too; the
notes in it are written by hand, so ``bench/results/latest.json`` of one run is not the source). This
script reads its tables and draws, into ``docs/img/``:

- ``bench-ratios.png``: every ratio row of the CPU table turned the same way round, accelerate's time
  over raw PyTorch's (a rate is inverted, a ``raw/acc`` ratio too), with its [min, max] over the
  repeats, the 1.0 line and the row's target, coloured by its result;
- ``bench-startup.png``: the start-up rows (milliseconds over raw, with the +20 ms target);
- ``bench-gpu.png``: the GPU table, ours and upstream each over raw PyTorch.

Each PNG carries a fingerprint of the numbers it was drawn from (a PNG text chunk), so
``tests/bench/test_plot.py`` fails when the table changes and the images were not redrawn;
``python bench/plot.py --check`` says the same. Needs matplotlib (the ``docs`` extra).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import struct
import sys
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
IMAGES = ROOT / "docs" / "img"
FINGERPRINT_KEY = "Source-Data"
CPU_SECTION = "## Latest CPU run\n"
GPU_HEADER = "| benchmark ("

_STAT = re.compile(r"^(?P<median>[+-]?[\d.]+) \[(?P<low>[+-]?[\d.]+), (?P<high>[+-]?[\d.]+)\]")
_TARGET = re.compile(r"^(?P<op><=|>=) (?P<value>[+-]?[\d.]+)")
# How each kind of ratio in the "compared" column becomes accelerate's time over raw's. A ratio of
# times with accelerate on top is taken as it is; raw on top, or a ratio of rates, is inverted.
# Rows that report a figure rather than a ratio (the pipeline bubble counted from a schedule's table).
_NOT_RATIOS = frozenset({"action table"})
_ORIENTATION = {
    "acc/raw time": False,
    "async/sync time": False,  # ours against ours: the async save's blocking time over a sync save
    "elastic/restart time": False,  # accelerate's elastic re-formation against a plain restart
    "elastic/(restart+waits)": False,  # the same against a restart plus the rendezvous waits --rdzv_conf sets
    "ft/elastic time": False,  # ours against ours: fault-tolerant recovery over elastic re-formation
    "raw/acc time": True,
    "acc/raw samples/s": True,
}


@dataclass(frozen=True)
class RatioRow:
    """One row as accelerate's time over raw's: lower is faster; ``target`` is an upper bound."""

    label: str
    median: float
    low: float
    high: float
    target: float | None
    status: str  # pass | miss | info


@dataclass(frozen=True)
class GpuRow:
    label: str
    ours: float
    upstream: float


@dataclass(frozen=True)
class Tables:
    ratios: list[RatioRow]
    startup: list[RatioRow]  # milliseconds over raw; target an upper bound in ms
    gpu: list[GpuRow]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _section(text: str, heading: str) -> str:
    if heading not in text:
        raise ValueError(f"{PAGE.name}: no {heading.strip()!r} section; the plots are drawn from its table")
    start = text.index(heading) + len(heading)
    end = text.find("\n## ", start)
    return text[start : end if end != -1 else len(text)]


def _label(bench: str, metric: str, width: int = 68) -> str:
    text = f"{bench}: {metric}".replace("`", "")
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def parse_tables(text: str) -> Tables:
    """The plotted numbers of docs/benchmarks.md; raises naming the row it cannot read."""
    ratios: list[RatioRow] = []
    startup: list[RatioRow] = []
    rows = [line for line in _section(text, CPU_SECTION).splitlines() if line.startswith("| ")]
    for line in rows[1:]:  # the first is the header
        bench, metric, _raw, _acc, _unit, compared, stat, target_text, result = _cells(line)[:9]
        status = result.split(" ", 1)[0]
        if status == "skip":
            continue
        stat_match, target_match = _STAT.match(stat), _TARGET.match(target_text)
        if stat_match is None:
            raise ValueError(
                f"{PAGE.name}: row {bench!r} / {metric!r}: cannot read {stat!r} as 'median [min, max]'"
            )
        median, low, high = (float(stat_match[k]) for k in ("median", "low", "high"))
        target = float(target_match["value"]) if target_match else None
        label = _label(bench, metric)
        if compared == "acc - raw":
            startup.append(RatioRow(label, median, low, high, target, status))
            continue
        if compared in _NOT_RATIOS:  # a figure of the run, not ours against raw: nothing to plot
            continue
        if compared not in _ORIENTATION:
            raise ValueError(
                f"{PAGE.name}: row {bench!r} / {metric!r} compares {compared!r}; bench/plot.py knows "
                f"{sorted(_ORIENTATION)} (add the new kind to _ORIENTATION, saying which way round it is)"
            )
        if _ORIENTATION[compared]:
            median, low, high = 1 / median, 1 / high, 1 / low
            target = 1 / target if target is not None else None
        ratios.append(RatioRow(label, median, low, high, target, status))
    gpu: list[GpuRow] = []
    lines = text.splitlines()
    if any(line.startswith(GPU_HEADER) for line in lines):
        start = next(i for i, line in enumerate(lines) if line.startswith(GPU_HEADER))
        for line in lines[start + 2 :]:
            if not line.startswith("| "):
                break
            cells = _cells(line)
            gpu.append(GpuRow(cells[0].replace("`", ""), _number(cells[3]), _number(cells[4])))
    return Tables(ratios, startup, gpu)


def fingerprint(rows: Sequence[Any]) -> str:
    """A hash of the numbers a plot shows (notes and wording of the table do not change it)."""
    data = json.dumps([asdict(row) for row in rows], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:16]


def png_text(path: Path) -> dict[str, str]:
    """The tEXt chunks of a PNG file (where each plot keeps its fingerprint)."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG file")
    found: dict[str, str] = {}
    at = 8
    while at + 8 <= len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            found[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            found[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        at += 12 + length
    return found


_COLOURS = {"pass": "#2e7d32", "miss": "#c62828", "info": "#757575"}


def _save(figure: Any, path: Path, rows: Sequence[Any]) -> None:
    # No software or date chunk: the same numbers give the same file on the same matplotlib.
    figure.savefig(path, dpi=100, metadata={"Software": None, FINGERPRINT_KEY: fingerprint(rows)})


def _legend(ax: Any, loc: str) -> None:
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], marker="o", linestyle="-", color=colour, label=status)
        for status, colour in _COLOURS.items()
    ]
    handles.append(Line2D([], [], marker="|", linestyle="", color="black", markersize=12, label="target"))
    ax.legend(handles=handles, loc=loc, fontsize=8, framealpha=0.9)


def _axes(rows: Sequence[Any], row_height: float, margin: float) -> tuple[Any, Any, list[int]]:
    """A figure with one horizontal axis for ``rows`` (the first at the top), and each row's y."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, row_height * len(rows) + margin), layout="constrained")
    return figure, figure.add_subplot(), list(range(len(rows)))[::-1]


def _annotate_axes(ax: Any, ys: Sequence[int], rows: Sequence[Any], xlabel: str, title: str) -> None:
    """Each row's name at its y, the x grid, the axis label and the title."""
    ax.set_yticks(ys, [row.label for row in rows], fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)


def draw_ratios(rows: Sequence[RatioRow], path: Path) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator

    figure, ax, ys = _axes(rows, 0.27, 1.4)
    for y, row in zip(ys, rows):
        colour = _COLOURS.get(row.status, "black")
        ax.plot([row.low, row.high], [y, y], color=colour, linewidth=1.2, alpha=0.6)
        ax.plot([row.median], [y], marker="o", color=colour, markersize=5)
        if row.target is not None:
            ax.plot([row.target], [y], marker="|", color="black", markersize=11)
        ax.annotate(f"{row.median:.2f}", (max(row.high, row.median), y), xytext=(4, -3),
                    textcoords="offset points", fontsize=7, color=colour)  # fmt: skip
    # Dashed and grey, so that the targets (black ticks a few percent off 1.0) stand out from it.
    ax.axvline(1.0, color="#9e9e9e", linewidth=1, linestyle="--")
    ax.set_xscale("log")
    ticks = [0.125, 0.25, 0.5, 0.75, 1, 1.5, 2, 3]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.set_xlim(0.1, 3.5)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    _annotate_axes(
        ax, ys, rows, "accelerate's time / raw PyTorch's time  (1.0 = the same; lower is faster; log scale)",
        "Latest CPU run: median and [min, max] of each row, and its target",
    )  # fmt: skip
    _legend(ax, "upper left")
    _save(figure, path, rows)


def draw_startup(rows: Sequence[RatioRow], path: Path) -> None:
    figure, ax, ys = _axes(rows, 0.35, 1.3)
    for y, row in zip(ys, rows):
        colour = _COLOURS.get(row.status, "black")
        ax.barh([y], [row.median], color=colour, alpha=0.75, height=0.6)
        ax.plot([row.low, row.high], [y, y], color="black", linewidth=1)
        if row.target is not None:
            ax.plot([row.target], [y], marker="|", color="black", markersize=14)
        ax.annotate(
            f"+{row.median:.1f} ms", (row.high, y), xytext=(4, -3), textcoords="offset points", fontsize=7
        )
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlim(0, max(row.high for row in rows) * 1.15)  # room for the last label
    _annotate_axes(
        ax, ys, rows, "milliseconds over raw (median, [min, max]); the judged rows' target is +20 ms",
        "Start-up: what importing accelerate and building an Accelerator add",
    )  # fmt: skip
    _legend(ax, "lower right")
    _save(figure, path, rows)


def draw_gpu(rows: Sequence[GpuRow], path: Path) -> None:
    figure, ax, ys = _axes(rows, 0.6, 1.3)
    for y, row in zip(ys, rows):
        for offset, value, colour, name in ((0.18, row.ours, "#1565c0", "ours"),
                                            (-0.18, row.upstream, "#ef6c00", "upstream")):  # fmt: skip
            ax.barh([y + offset], [value], height=0.34, color=colour, label=name if y == ys[0] else None)
            ax.annotate(
                f"{value:.2f}", (value, y + offset), xytext=(4, -3), textcoords="offset points", fontsize=7
            )
    ax.axvline(1.0, color="black", linewidth=0.8)
    _annotate_axes(
        ax, ys, rows, "time / raw PyTorch's time in the same process (1.0 = the same; lower is faster)",
        "On one GPU: ours and upstream accelerate, each over raw PyTorch",
    )  # fmt: skip
    ax.legend(loc="upper right", fontsize=8)
    _save(figure, path, rows)


def plots(tables: Tables) -> dict[str, tuple[Sequence[Any], Any]]:
    """Each image's file name, the rows it shows and the function that draws it."""
    return {
        "bench-ratios.png": (tables.ratios, draw_ratios),
        "bench-startup.png": (tables.startup, draw_startup),
        "bench-gpu.png": (tables.gpu, draw_gpu),
    }


def stale_images(tables: Tables, folder: Path = IMAGES) -> list[str]:
    """The images that are missing or were drawn from other numbers than the table's."""
    stale = []
    for name, (rows, _draw) in plots(tables).items():
        path = folder / name
        if not path.is_file() or png_text(path).get(FINGERPRINT_KEY) != fingerprint(rows):
            stale.append(name)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the images match the tables")
    parser.add_argument("--out", type=Path, default=IMAGES, help="folder for the PNGs (default docs/img)")
    args = parser.parse_args(argv)
    tables = parse_tables(PAGE.read_text(encoding="utf-8"))
    if args.check:
        stale = stale_images(tables, args.out)
        for name in stale:
            print(
                f"{args.out / name}: out of date with {PAGE.name}; run `python bench/plot.py`",
                file=sys.stderr,
            )
        return 1 if stale else 0
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print('bench/plot.py needs matplotlib: pip install -e ".[docs]" torch==<yours>', file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (rows, draw) in plots(tables).items():
        draw(rows, args.out / name)
        print(f"wrote {args.out / name} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
