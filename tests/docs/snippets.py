"""Code blocks of the documentation (docs/**/*.md) and the markers that say how each one runs.

A marker is an HTML comment on the line right above a fenced block (several may be stacked):

- ``<!-- file: NAME -->``: the block is written to NAME in the page's working folder and not run by
  itself; a later block of the same page uses it (``accelerate launch ... train.py``, ``--config_file``).
- ``<!-- launch: FLAGS -->`` (python): the block is a complete script, run as
  ``accelerate launch FLAGS script.py`` (several processes).
- ``<!-- run -->`` (shell): the block is run with bash in the page's working folder.
- ``<!-- not-run: REASON -->``: not run; the reason is required (a GPU, a cluster, a long wait).

A ``python`` block without a marker is run as ``python script.py``. A shell block needs ``run`` or
``not-run``. Blocks in other languages (text, yaml, diff, ...) are not code unless a ``file`` marker
names them. The blocks of one page run in order, in one temporary folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
LANGUAGES = ("zh", "hi")
PYTHON = ("python", "py")
SHELL = ("bash", "sh", "shell", "console")

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>file|launch|run|not-run)\s*(?::\s*(?P<arg>.*?))?\s*-->\s*$")


class MarkerError(ValueError):
    """A block whose markers do not say how to run it."""


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    markers: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def is_python(self) -> bool:
        return self.lang in PYTHON

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL

    def check(self) -> None:
        """Raise MarkerError unless the markers say unambiguously how this block runs."""
        if "not-run" in self.markers and not self.markers["not-run"]:
            raise MarkerError(f"{self.where}: `<!-- not-run: REASON -->` needs a reason")
        if "launch" in self.markers and not self.is_python:
            raise MarkerError(f"{self.where}: `launch` applies to python blocks, not {self.lang!r}")
        if "run" in self.markers and not self.is_shell:
            raise MarkerError(f"{self.where}: `run` applies to shell blocks; python blocks run unmarked")
        if self.is_shell and not ({"run", "not-run", "file"} & self.markers.keys()):
            raise MarkerError(
                f"{self.where}: a {self.lang} block needs `<!-- run -->` above it, or "
                "`<!-- not-run: REASON -->` saying why it cannot run in the test suite"
            )
        if len({"run", "not-run", "launch", "file"} & self.markers.keys()) > 1:
            raise MarkerError(f"{self.where}: choose one of file / launch / run / not-run")

    @property
    def runs(self) -> bool:
        return (self.is_python or self.is_shell) and not ({"not-run", "file"} & self.markers.keys())


def parse(page: Path) -> list[Block]:
    """Every fenced block of one Markdown page, with the markers right above it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, lang = opening["indent"], opening["fence"], opening["lang"].lower()
        markers: dict[str, str] = {}
        j = i - 1
        while j >= 0 and (found := _MARKER.match(lines[j])):
            markers.setdefault(found["kind"], (found["arg"] or "").strip())
            j -= 1
        body: list[str] = []
        k = i + 1
        while k < len(lines) and not lines[k].strip().startswith(fence):
            line = lines[k]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            k += 1
        blocks.append(Block(page, i + 1, lang, "\n".join(body) + "\n", markers))
        i = k + 1
    return blocks


def english_pages() -> list[Path]:
    return sorted(
        p for p in DOCS.rglob("*.md") if not any(p.name.endswith(f".{lang}.md") for lang in LANGUAGES)
    )


def translations() -> list[tuple[Path, Path]]:
    """(translated page, the English page it translates)."""
    pairs = []
    for lang in LANGUAGES:
        for page in sorted(DOCS.rglob(f"*.{lang}.md")):
            pairs.append((page, page.with_name(page.name[: -len(f".{lang}.md")] + ".md")))
    return pairs
