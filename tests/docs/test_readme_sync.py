"""README.md keeps the differences from upstream and the latest benchmark table (the project's
contract for its repository page), each in short form; the docs site has the full text on its own
pages. Both must say the same thing, so a change to one that is not made in the other fails here:

- the differences: one README bullet per docs entry, in the same order, each starting with its
  entry's leading words and linking to that entry's anchor;
- the benchmarks: the same rows in the same order, every number, target and result word equal (the
  README leaves out the notes that follow the result word)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DIFFERENCES = ROOT / "docs" / "differences.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"

# A docs entry starts with the anchor the README links to: `- <a id="name"></a>Text ...`.
_ANCHOR = re.compile(r'<a id="(?P<id>[a-z0-9-]+)"></a>')
_README_LINK = re.compile(r"\(docs/differences\.md#(?P<id>[a-z0-9-]+)\)")


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


def _lead(entry: str) -> str:
    """What a summary must start with: the entry's leading code span, or else its first three words."""
    if entry.startswith("`"):
        return entry[: entry.index("`", 1) + 1]
    return " ".join(entry.split()[:3])


def _docs_entries() -> list[tuple[str, str]]:
    """(anchor, text) of each entry of docs/differences.md, in order; raises naming one without."""
    entries: list[tuple[str, str]] = []
    for item in _bullets(DIFFERENCES.read_text()):
        match = _ANCHOR.match(item)
        if match is None:
            raise AssertionError(
                f"docs/differences.md: the entry {item[:60]!r}... has no leading "
                '`<a id="..."></a>` anchor for the README to link to; add one'
            )
        entries.append((match["id"], item[match.end() :]))
    return entries


def _readme_summaries() -> list[str]:
    return _bullets(_section(README.read_text(), "## Differences from upstream\n"))


def test_readme_and_docs_list_the_same_differences_in_the_same_order() -> None:
    entries = _docs_entries()
    summaries = _readme_summaries()
    assert len(entries) > 20
    assert len(summaries) == len(entries), (
        f"README lists {len(summaries)} differences, docs/differences.md {len(entries)}: "
        "each entry needs its one-line summary in the README, in the same order"
    )
    anchors = [anchor for anchor, _ in entries]
    assert len(set(anchors)) == len(anchors), f"docs/differences.md repeats an anchor: {anchors}"
    for position, (summary, (anchor, entry)) in enumerate(zip(summaries, entries, strict=True), 1):
        links = _README_LINK.findall(summary)
        assert links == [anchor], (
            f"README difference {position} ({summary[:50]!r}...) should link once to "
            f"docs/differences.md#{anchor}, the entry in the same place; it links to {links}"
        )
        lead = _lead(entry)
        assert summary.startswith(lead), (
            f"README difference {position} should start with {lead!r} as its docs entry "
            f"does; it starts {summary[:50]!r}"
        )


def _table_rows(text: str) -> list[list[str]]:
    """The table's lines as cells: the header, the `|---|` line (without it nothing renders), the rows."""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in rows]


def _measured_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Measured on"))


def test_readme_and_docs_show_the_same_benchmark_rows() -> None:
    readme_section = _section(README.read_text(), "## Benchmarks\n")
    page_section = _section(BENCHMARKS.read_text(), "## Latest CPU run\n")
    readme, page = _table_rows(readme_section), _table_rows(page_section)
    assert len(page) > 20
    assert readme[:2] == page[:2], (
        "the README's benchmark table should open with docs/benchmarks.md's header and `|---|` lines"
    )
    assert len(readme) == len(page), (
        f"README's benchmark table has {len(readme) - 2} rows, docs/benchmarks.md's {len(page) - 2}"
    )
    for readme_row, page_row in zip(readme[2:], page[2:], strict=True):
        # The README keeps the result word (pass / miss / info) and leaves the note to the page.
        expected = [*page_row[:-1], page_row[-1].split(" ", 1)[0]]
        assert readme_row == expected, (
            f"README row {readme_row[:2]} differs from docs/benchmarks.md's {page_row}"
        )
    assert _measured_line(readme_section) == _measured_line(page_section)


def test_readme_links_to_the_benchmarks_page() -> None:
    assert "(docs/benchmarks.md)" in _section(README.read_text(), "## Benchmarks\n")
