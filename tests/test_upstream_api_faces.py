"""Upstream's names in the modules this suite covers import from ours, with compatible signatures.

Reads ../shared/reference/upstream-api-1.15.md (skipped when absent): for each name of the covered
sections (and their re-exports under ``accelerate.utils``) the name must import, and a function or
class written with a parameter list must accept upstream's call: the same parameters in the same
order with the same literal defaults. Ours may add parameters after them only where upstream's calls
cannot reach them positionally (keyword-only, or ``*args``/``**kwargs``). Methods listed for a class
must exist.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.reference import REFERENCE

_CANDIDATES = [REFERENCE]

SECTIONS = (
    "accelerate.utils.operations",
    "accelerate.utils.other",
    "accelerate.optimizer",
    "accelerate.data_loader",
    "accelerate.checkpointing",
)

# Known, owned elsewhere: the name imports, its signature is another change's job.
SIGNATURE_OWNED_ELSEWHERE = {
    "extract_model_from_parallel": "the `recursive` parameter comes with the hooks work on utils/modeling.py",
}


@dataclass
class Entry:
    module: str
    name: str
    params: list[str] | None  # None: no parameter list given (a constant, a module)
    methods: list[str] = field(default_factory=list)


def _split(params: str) -> list[str]:
    out, depth, current = [], 0, ""
    for ch in params:
        depth += ch in "([{<"
        depth -= ch in ")]}>"
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        out.append(current.strip())
    return out


def _reference() -> Path | None:
    return next((path for path in _CANDIDATES if path.is_file()), None)


def _entries() -> list[Entry]:
    path = _reference()
    if path is None:
        return []
    entries: list[Entry] = []
    current: Entry | None = None  # the entry method lines belong to (None: an uncovered one)
    module: str | None = None
    for line in path.read_text().splitlines():
        heading = re.match(r"## (accelerate[\w.]*)\s*$", line)
        if heading:
            module = heading.group(1)
            continue
        if line.startswith("## "):
            module = None
        if module is None:
            continue
        item = re.match(r"- (?:class |def |module )?([A-Za-z_]\w*)(?:\((.*?)\))?(?=\s|$)", line)
        if item:
            defined = re.search(r"\(defined in ([\w.]+)\)", line)
            covered = module in SECTIONS or (
                module == "accelerate.utils" and defined and defined.group(1) in SECTIONS
            )
            current = None
            if covered:
                params = _split(item.group(2)) if item.group(2) is not None else None
                current = Entry(module, item.group(1), params)
                entries.append(current)
        elif line.startswith("    .") and current is not None:
            current.methods.extend(re.findall(r"\.(\w+)\(", line))
    return entries


ENTRIES = _entries()


def _compatible(ours: inspect.Signature, upstream: list[str]) -> list[str]:
    """What in ``ours`` breaks a call written against ``upstream`` (empty: nothing)."""
    if upstream == ["*args", "**kwargs"]:
        return []  # upstream's own signature says nothing
    problems: list[str] = []
    params = list(ours.parameters.values())
    var_positional = any(p.kind is p.VAR_POSITIONAL for p in params)
    var_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
    named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    wanted = [u for u in upstream if not u.startswith("*")]
    if "**kwargs" in upstream and not var_keyword:
        problems.append("no **kwargs")
    if "*args" in upstream and not var_positional:
        problems.append("no *args")
    for i, spec in enumerate(wanted):
        name, _, default = spec.partition("=")
        if i >= len(named) or named[i].name != name:
            problems.append(f"parameter {i} should be {name!r}, ours: {[p.name for p in named]}")
            break
        if named[i].kind is named[i].KEYWORD_ONLY and "*args" not in upstream:
            problems.append(f"{name!r} is keyword-only here")
        if default and not default.startswith("<") and repr(named[i].default) != default:
            problems.append(f"{name}={default} upstream, {name}={named[i].default!r} here")
    for extra in named[len(wanted) :]:
        reachable = extra.kind in (extra.POSITIONAL_ONLY, extra.POSITIONAL_OR_KEYWORD)
        if extra.default is extra.empty:
            problems.append(f"extra required parameter {extra.name!r}")
        elif reachable and "*args" in upstream:
            problems.append(f"extra positional {extra.name!r} would take upstream's *args")
    return problems


def _signature(obj: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):  # builtins and exception classes have none to read
        return None


@pytest.mark.skipif(not ENTRIES, reason="the upstream API reference is not available here")
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{e.module}.{e.name}")
def test_upstream_name_is_compatible(entry: Entry) -> None:
    module = importlib.import_module(entry.module)
    obj = getattr(module, entry.name, None)
    if obj is None:
        obj = importlib.import_module(f"{entry.module}.{entry.name}")  # a submodule name
    missing = [m for m in entry.methods if not hasattr(obj, m)]
    assert not missing, f"{entry.module}.{entry.name} lacks methods {missing}"
    if entry.params is None or entry.name in SIGNATURE_OWNED_ELSEWHERE:
        return
    signature = _signature(obj)
    if signature is None:
        assert entry.params == [], (
            f"{entry.module}.{entry.name}: upstream takes {entry.params}, ours has no signature"
        )
        return
    problems = _compatible(signature, entry.params)
    assert not problems, f"{entry.module}.{entry.name}{signature}: " + "; ".join(problems)


def test_the_walk_covers_every_section() -> None:
    if not ENTRIES:
        pytest.skip("the upstream API reference is not available here")
    assert {e.module for e in ENTRIES} >= set(SECTIONS) | {"accelerate.utils"}
    assert len(ENTRIES) > 100


@pytest.mark.parametrize(
    ("module", "cls", "name"),
    [
        ("accelerate", "Accelerator", "profile_handler"),
        ("accelerate", "AcceleratorState", "destroy_process_group"),
        ("accelerate", "AcceleratorState", "fork_launched"),
        ("accelerate.data_loader", "DataLoaderDispatcher", "submesh_dp"),
        ("accelerate.data_loader", "DataLoaderDispatcher", "submesh_fsdp"),
        ("accelerate.data_loader", "DataLoaderDispatcher", "submesh_tp"),
    ],
)
def test_members_upstream_defines_on_the_class(module: str, cls: str, name: str) -> None:
    # hasattr(Class, name), inspect.getmembers and mock.patch.object(Class, name) see them, as upstream.
    from unittest import mock

    owner = getattr(importlib.import_module(module), cls)
    assert hasattr(owner, name) and name in dict(inspect.getmembers(owner))
    with mock.patch.object(owner, name, "patched"):
        assert getattr(owner, name) == "patched"


def test_accelerator_state_forwards_fork_launched_and_destroy_process_group() -> None:
    from accelerate import AcceleratorState, PartialState

    state = AcceleratorState(cpu=True)
    assert state.fork_launched is PartialState().fork_launched is False
    assert inspect.signature(AcceleratorState.destroy_process_group).parameters["group"].default is None
    state.destroy_process_group()  # one process, no group: nothing to destroy
