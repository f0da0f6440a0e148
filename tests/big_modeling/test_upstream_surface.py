"""The big-model names at upstream's module paths, with upstream's parameter names, order and defaults.

Reads the shared reference list (upstream 1.15's interface) when it is present.
"""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from tests.helpers.reference import REFERENCE

SECTIONS = (
    "accelerate.hooks",
    "accelerate.big_modeling",
    "accelerate.utils.modeling",
    "accelerate.utils.offload",
)
# Upstream keeps these in utils.modeling, but they belong to mixed precision and peft, not big-model inference.
ELSEWHERE = {"get_grad_scaler", "get_mixed_precision_context_manager", "is_peft_model"}
ENTRY = re.compile(r"^- (def|class) (\w+)\((.*)\)(?:\s+\(defined in ([\w.]+)\))?(?:\s+\[missing\])?\s*$")


def _entries() -> list[tuple[str, str, str, str]]:
    if not REFERENCE.is_file():
        pytest.skip(f"{REFERENCE} not available")
    found: list[tuple[str, str, str, str]] = []
    section = ""
    for line in REFERENCE.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        match = ENTRY.match(line)
        if match is None:
            continue
        kind, name, params, defined = match.groups()
        if name in ELSEWHERE:
            continue
        if (
            section in SECTIONS
            or section in ("accelerate", "accelerate.utils")
            and defined
            and (defined in SECTIONS[2:] or (defined == "accelerate.big_modeling"))
        ):
            found.append((section, kind, name, params))
    return found


def _split_params(text: str) -> list[str]:
    parts: list[str] = []
    depth, current = 0, ""
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current.strip())
    return parts


def _ours(obj: object) -> list[str]:
    target = obj.__init__ if inspect.isclass(obj) else obj  # type: ignore[misc]
    params = list(inspect.signature(target).parameters.values())
    if inspect.isclass(obj):
        params = params[1:]  # self
    shown = []
    for param in params:
        prefix = (
            "*" if param.kind is param.VAR_POSITIONAL else "**" if param.kind is param.VAR_KEYWORD else ""
        )
        default = "" if param.default is param.empty else f"={param.default!r}"
        shown.append(f"{prefix}{param.name}{default}")
    return shown


def test_every_big_model_name_matches_upstream_signature() -> None:
    entries = _entries()
    assert len(entries) > 40
    problems = []
    for module_name, kind, name, params in entries:
        module = importlib.import_module(module_name)
        obj = getattr(module, name, None)
        if obj is None:
            problems.append(f"{module_name}.{name} is missing")
            continue
        if kind == "class" and params in ("", "*args, **kwds"):
            continue  # enums and argument-less classes
        if _ours(obj) != _split_params(params):
            problems.append(f"{module_name}.{name}: ours ({', '.join(_ours(obj))}) vs upstream ({params})")
    assert not problems, "\n".join(problems)


METHOD = re.compile(r"\.(\w+)\(([^()]*)\)")


def _class_methods() -> list[tuple[str, str, str, str]]:
    """``(module, class, method, params)`` for the methods listed under the classes of SECTIONS."""
    if not REFERENCE.is_file():
        pytest.skip(f"{REFERENCE} not available")
    found: list[tuple[str, str, str, str]] = []
    section, current = "", ""
    for line in REFERENCE.read_text().splitlines():
        if line.startswith("## "):
            section, current = line[3:].strip(), ""
            continue
        match = ENTRY.match(line)
        if match is not None:
            current = match.group(2) if match.group(1) == "class" and section in SECTIONS else ""
            continue
        if current and line.startswith("    .") and "fields:" not in line:
            found += [(section, current, name, params) for name, params in METHOD.findall(line)]
    return found


def test_hook_and_loader_methods_match_upstream() -> None:
    methods = _class_methods()
    assert any(name == "pre_forward" for _, _, name, _ in methods)
    problems = []
    for module_name, class_name, name, params in methods:
        cls = getattr(importlib.import_module(module_name), class_name)
        method = getattr(cls, name, None)
        if method is None:
            problems.append(f"{class_name}.{name} is missing")
        elif _ours(method)[1:] != _split_params(params):  # [1:]: self
            problems.append(
                f"{class_name}.{name}: ours ({', '.join(_ours(method)[1:])}) vs upstream ({params})"
            )
    assert not problems, "\n".join(problems)
