"""README.md keeps the differences from upstream and the latest benchmark table (the project's
contract for its repository page); the docs site has the same on its own pages. Both must say the
same thing, so a change to one that is not made in the other fails here."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _section(text: str, heading: str) -> str:
    start = text.index(heading) + len(heading)
    nxt = text.find("\n## ", start)
    return text[start : nxt if nxt != -1 else len(text)]


def _bullets(text: str) -> list[str]:
    """The top-level list items of a section, each joined into one line."""
    items: list[str] = []
    for line in text.splitlines():
        if line.startswith("- "):
            items.append(line[2:].strip())
        elif line.startswith("  ") and items:
            items[-1] += " " + line.strip()
    return items


def _table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")]


def test_readme_and_docs_list_the_same_differences() -> None:
    readme = _bullets(_section((ROOT / "README.md").read_text(), "## Differences from upstream\n"))
    # A link works from where its file is: README's `docs/how-to/x.md` is the page's `how-to/x.md`.
    readme = [item.replace("](docs/", "](") for item in readme]
    page = _bullets((ROOT / "docs" / "differences.md").read_text())
    assert len(readme) > 20
    assert readme == page


def test_readme_and_docs_show_the_same_benchmark_table() -> None:
    readme = _table_rows(_section((ROOT / "README.md").read_text(), "## Benchmarks\n"))
    page = _table_rows(_section((ROOT / "docs" / "benchmarks.md").read_text(), "## Latest CPU run\n"))
    assert len(readme) > 20
    assert readme == page
