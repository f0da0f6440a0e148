"""bench/plot.py: the benchmark page's images are drawn from its current tables, every ratio turned the
same way round. The up-to-date check reads the fingerprint each PNG carries, so it needs no matplotlib."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from bench import plot

_HEADER = (
    "| bench | metric | raw | accelerate | unit | compared | median [min, max] | target | result |\n"
    "|---|---|---|---|---|---|---|---|---|\n"
)


def _page(*rows: str) -> str:
    return "# Benchmarks\n\n## Latest CPU run\n\n" + _HEADER + "\n".join(rows) + "\n\n## Next\n"


def test_committed_images_match_the_benchmark_tables() -> None:
    tables = plot.parse_tables(plot.PAGE.read_text(encoding="utf-8"))
    assert len(tables.ratios) > 20 and tables.startup and tables.gpu
    stale = plot.stale_images(tables)
    assert not stale, (
        f"docs/img/{stale} were drawn from other numbers than docs/benchmarks.md: run `make bench-plots`"
    )


def test_the_page_shows_every_image() -> None:
    text = plot.PAGE.read_text(encoding="utf-8")
    tables = plot.parse_tables(text)
    missing = [name for name in plot.plots(tables) if f"](img/{name})" not in text]
    assert not missing, f"docs/benchmarks.md does not embed {missing}"


def test_every_ratio_becomes_accelerate_time_over_raw() -> None:
    tables = plot.parse_tables(
        _page(
            "| step | a | 1 | 2 | ms | raw/acc time | 0.500 [0.400, 0.800] | >= 0.98 | miss |",
            "| coll | b | 1 | 2 | ms | acc/raw time | 1.100 [1.000, 1.200] | <= 1.05 | miss (why) |",
            "| data | c | 1 | 2 | samples/s | acc/raw samples/s | 0.800 [0.500, 1.000] |  | info |",
            "| startup | `d` | 0.000 | 16.3 | ms | acc - raw | +16.3 [+15.7, +18.5] ms | <= +20 ms | pass |",
            "| fp8 | e | - | - | ms | raw/acc time | - | >= 0.98 | skip (not available: torchao) |",
        )
    )
    first, second, third = tables.ratios
    assert (first.median, first.low, first.high) == (2.0, 1.25, 2.5)
    assert first.target == pytest.approx(1 / 0.98) and first.status == "miss"
    assert (second.median, second.low, second.high, second.target) == (1.1, 1.0, 1.2, 1.05)
    assert (third.median, third.low, third.high, third.target) == (1.25, 1.0, 2.0, None)
    assert tables.startup == [plot.RatioRow("startup: d", 16.3, 15.7, 18.5, 20.0, "pass")]
    assert tables.gpu == []


def test_an_unknown_comparison_is_an_error_naming_the_row() -> None:
    page = _page("| new | thing | 1 | 2 | ms | ours/theirs | 1.000 [1.000, 1.000] | <= 1 | pass |")
    with pytest.raises(ValueError, match=r"'new' / 'thing' compares 'ours/theirs'.*_ORIENTATION"):
        plot.parse_tables(page)


def test_the_fingerprint_ignores_notes_but_not_numbers() -> None:
    row = "| coll | b | 1 | 2 | ms | acc/raw time | 1.100 [1.000, 1.200] | <= 1.05 | {} |"
    base = plot.fingerprint(plot.parse_tables(_page(row.format("pass"))).ratios)
    assert plot.fingerprint(plot.parse_tables(_page(row.format("pass (rerun at noon)"))).ratios) == base
    assert plot.fingerprint(plot.parse_tables(_page(row.format("miss"))).ratios) != base


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="matplotlib (the docs extra) is missing"
)
def test_drawn_images_carry_their_fingerprint(tmp_path: Path) -> None:
    tables = plot.parse_tables(plot.PAGE.read_text(encoding="utf-8"))
    assert plot.main(["--out", str(tmp_path)]) == 0
    assert plot.stale_images(tables, tmp_path) == []
    assert plot.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "bench-gpu.png").unlink()
    assert plot.main(["--check", "--out", str(tmp_path)]) == 1
