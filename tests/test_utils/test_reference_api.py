"""Every name of upstream's test_utils interface exists here, with upstream's parameters and defaults.

Walks the sections ``accelerate.test_utils``, ``.testing``, ``.training`` and ``.examples`` of the
reference list (``shared/reference/upstream-api-1.15.md``; skipped where the file is absent).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.reference import REFERENCE as _SHARED_REFERENCE

SECTIONS = (
    "accelerate.test_utils", "accelerate.test_utils.testing", "accelerate.test_utils.training",
    "accelerate.test_utils.examples",
)  # fmt: skip
REFERENCE = _SHARED_REFERENCE if _SHARED_REFERENCE.is_file() else None
# Values that describe the machine the reference was made on, not the interface.
MACHINE_DEPENDENT = {"device_count", "torch_device"}


@dataclass
class Entry:
    module: str
    kind: str  # "def" | "class" | "const" | "module"
    name: str
    params: str | None = None  # the text between the parentheses
    value: str | None = None
    methods: dict[str, str] = field(default_factory=dict)


def _balanced(text: str, start: int) -> int:
    """Index of the parenthesis closing the one at ``start`` (quotes respected)."""
    depth, quote = 0, ""
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced parentheses in {text!r}")


def _methods(line: str) -> dict[str, str]:
    methods, i = {}, 0
    while (dot := line.find(".", i)) != -1:
        open_at = line.find("(", dot)
        name = line[dot + 1 : open_at if open_at != -1 else None].strip()
        if open_at == -1 or not name.isidentifier():
            # ".name (property)" style entries carry no parameters
            end = line.find("  ", dot)
            i = len(line) if end == -1 else end
            continue
        close = _balanced(line, open_at)
        methods[name] = line[open_at + 1 : close]
        i = close + 1
    return methods


def parse_reference(path: Path) -> list[Entry]:
    entries: list[Entry] = []
    module = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        if raw.startswith("## "):
            module = raw[3:].strip() if raw[3:].strip() in SECTIONS else None
            continue
        if module is None:
            continue
        if raw.startswith("    .") and entries and entries[-1].kind == "class":
            entries[-1].methods.update(_methods(raw.strip()))
            continue
        if not raw.startswith("- "):
            continue
        text = raw[2:]
        if text.startswith(("def ", "class ")):
            kind, rest = text.split(" ", 1)
            open_at = rest.index("(")
            close = _balanced(rest, open_at)
            entries.append(Entry(module, kind, rest[:open_at], params=rest[open_at + 1 : close]))
        elif text.startswith("module "):
            entries.append(Entry(module, "module", text.split()[1]))
        elif " = " in text:
            name, value = text.split(" = ", 1)
            value = value.split("  [missing]")[0].split("  (defined in")[0].strip()
            entries.append(Entry(module, "const", name.strip(), value=value))
    return entries


def format_params(sig: inspect.Signature, drop_self: bool = False) -> str:
    """The reference's style: ``a, b=1, *args, key=None, **kwargs`` (no annotations)."""
    parts: list[str] = []
    star_written = False
    params = list(sig.parameters.values())
    if drop_self and params and params[0].name in ("self", "cls"):
        params = params[1:]
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
            star_written = True
            continue
        if p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
            continue
        if p.kind is p.KEYWORD_ONLY and not star_written:
            parts.append("*")
            star_written = True
        parts.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return ", ".join(parts)


ENTRIES = parse_reference(REFERENCE) if REFERENCE else []
pytestmark = pytest.mark.skipif(
    REFERENCE is None, reason="shared/reference/upstream-api-1.15.md is not present"
)


def test_reference_sections_were_found() -> None:
    assert {e.module for e in ENTRIES} == set(SECTIONS)
    assert len(ENTRIES) > 100
    by_name = {(e.module, e.name): e for e in ENTRIES}
    assert by_name[("accelerate.test_utils.training", "RegressionModel")].methods["forward"] == "x=None"
    assert by_name[("accelerate.test_utils.testing", "MockingTestCase")].methods["add_mocks"] == "mocks"
    assert by_name[("accelerate.test_utils", "test_ops")].kind == "module"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{e.module}.{e.name}")
def test_name_matches_reference(entry: Entry) -> None:
    module = importlib.import_module(entry.module)
    assert hasattr(module, entry.name), f"{entry.module} has no {entry.name}"
    obj = getattr(module, entry.name)
    if entry.kind == "module":
        assert isinstance(obj, types.ModuleType)
    elif entry.kind == "const":
        assert entry.value is not None
        if entry.name not in MACHINE_DEPENDENT:
            assert obj == ast.literal_eval(entry.value)
    elif entry.kind == "def":
        assert callable(obj) and not isinstance(obj, type)
        assert format_params(inspect.signature(obj)) == entry.params
    else:
        assert isinstance(obj, type)
        try:
            ours = format_params(inspect.signature(obj))
        except ValueError:  # an exception class with no Python-level __init__: upstream's "()" too
            ours = ""
        if entry.params == "":  # the reference lists "()" where it could not read a signature
            assert ours in ("", "*args, **kwargs")
        else:
            assert ours == entry.params
        for method, params in entry.methods.items():
            assert hasattr(obj, method), f"{entry.name}.{method} is missing"
            if method in obj.__dict__:  # our own methods: same parameters as upstream's
                assert format_params(inspect.signature(obj.__dict__[method]), drop_self=True) == params


def test_machine_dependent_values_describe_this_machine() -> None:
    from accelerate.test_utils import probes, testing

    assert testing.torch_device == probes.accelerator_device()
    assert testing.device_count == probes.device_count_of(testing.torch_device)
