"""Guards for the layering in ARCHITECTURE.md (issue 24): each fails with the file and line that broke it.

Modules stay small; ``checkpointing/`` knows no backend (it asks ``Strategy.checkpoint_io()``, see
checkpointing/checkpoint_io.py), so it neither imports ``accelerate.backends`` nor names FSDP or
DeepSpeed in its code; and every module imports on its own, so no import cycle hides behind the
order in which the package happens to load its modules.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "accelerate"
MAX_LINES = 500
# Both backends that checkpoint differently go through Strategy.checkpoint_io(): neither may be named.
_BACKEND_WORDS = re.compile(r"fsdp|deepspeed", re.IGNORECASE)


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


def _checkpointing() -> list[Path]:
    return sorted((SRC / "checkpointing").rglob("*.py"))


def _dotted(path: Path) -> str:
    parts = ["accelerate", *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_module_exceeds_the_line_limit() -> None:
    long = [
        f"{_name(p)}: {n} lines" for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES
    ]
    assert long == [], f"modules over {MAX_LINES} lines; split them by job: {long}"


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an import statement names, at any depth (function-level, TYPE_CHECKING blocks)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            # `from accelerate import backends` names the package through its alias.
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_checkpointing_imports_no_backend() -> None:
    found = [
        f"{_name(path)}:{line}: {module}"
        for path in _checkpointing()
        for line, module in _imported(ast.parse(path.read_text()))
        if module == "accelerate.backends" or module.startswith("accelerate.backends.")
    ]
    assert found == [], (
        "checkpointing/ imports a backend; ask the strategy's checkpoint I/O (Strategy.checkpoint_io(), "
        f"a CheckpointIO) instead: {found}"
    )


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants (documentation, allowed like comments)."""
    nodes = [
        tree,
        *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)),
    ]
    ids = set()
    for node in nodes:
        body = getattr(node, "body", [])
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            ids.add(id(body[0].value))
    return ids


def _code_words(tree: ast.AST) -> list[tuple[int, str]]:
    """Identifiers and string literals of the code (not its comments or docstrings), with their lines."""
    skip = _docstrings(tree)
    words: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name):
            words.append((line, node.id))
        elif isinstance(node, ast.Attribute):
            words.append((line, node.attr))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            words.append((line, node.name))
        elif isinstance(node, ast.arg | ast.keyword) and node.arg is not None:
            words.append((line, node.arg))
        elif isinstance(node, ast.alias):
            words += [(line, node.name), (line, node.asname or "")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            words.append((line, node.value))
    return words


def test_checkpointing_code_names_no_backend() -> None:
    found = sorted(
        {
            f"{_name(path)}:{line}: {word!r}"
            for path in _checkpointing()
            for line, word in _code_words(ast.parse(path.read_text()))
            if _BACKEND_WORDS.search(word)
        }
    )
    assert found == [], (
        "checkpointing/ names a backend in its code; move the backend's part behind its CheckpointIO "
        f"(backends/<backend>/...) and ask Strategy.checkpoint_io(): {found}"
    )


_IMPORT_ONE_BY_ONE = r"""
import importlib, json, sys, traceback

failed = {}
for name in json.loads(sys.stdin.read()):
    for loaded in [m for m in sys.modules if m == "accelerate" or m.startswith("accelerate.")]:
        del sys.modules[loaded]  # each module starts from a clean slate, as if imported first
    try:
        importlib.import_module(name)
    except BaseException:
        failed[name] = traceback.format_exc(limit=-3)
print(json.dumps(failed))
"""


def test_every_module_imports_first_without_a_cycle() -> None:
    """Each module imported first (accelerate's own modules cleared before each), in a fresh interpreter:
    a cycle shows as a partially initialised module, whichever module starts it."""
    names = [_dotted(p) for p in _modules() if p.name != "__main__.py"]
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_ONE_BY_ONE],
        input=json.dumps(names),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=SRC.parents[1],
    )
    assert result.returncode == 0, result.stderr[-4000:]
    failed = json.loads(result.stdout.strip().splitlines()[-1])
    assert failed == {}, "\n".join(f"{name}:\n{trace}" for name, trace in failed.items())


def test_no_branching_on_distributed_type_outside_the_resolver() -> None:
    """``DistributedType`` is for users to read: library code asks the run's description or the strategy.

    Fails on a comparison (==, !=, in, is) that names a ``DistributedType.<member>``, or that compares a
    ``distributed_type`` value against a string or a named collection, outside the modules below.
    """
    # Modules allowed to compare, each with why.
    allowed = {
        "backends/resolve.py": "the resolver: the one place that maps settings to a strategy and its type",
        "state/distributed_type.py": "the type's own definition: device -> type, and the multi-device types",
        # A launch config file's `distributed_type:` key is a string the launcher reads, not the run's type.
        "launch/plan.py": "reads the config file's distributed_type key (which flags it implies)",
        "launch/checks.py": "reads the config file's distributed_type key (types this build cannot run)",
        "launch/xla.py": "reads the config file's distributed_type key (XLA asked for)",
        "backends/fsdp/launch.py": "reads the config file's distributed_type key (FSDP section in use)",
        "utils/launch.py": "PrepareForLaunch's distributed_type argument, upstream's launcher-side string",
    }

    def names_member(node: ast.AST) -> bool:
        return any(
            isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "DistributedType"
            for n in ast.walk(node)
        )

    def is_type_value(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "distributed_type") or (
            isinstance(node, ast.Name) and node.id == "distributed_type"
        )

    def is_vocabulary(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) or (isinstance(node, ast.Constant) and isinstance(node.value, str))

    found = []
    for path in _modules():
        if _name(path) in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            typed = any(is_type_value(s) for s in sides) and any(
                is_vocabulary(s) and not is_type_value(s) for s in sides
            )
            if any(names_member(s) for s in sides) or typed:
                found.append(f"{_name(path)}:{node.lineno}: {ast.unparse(node)}")
    assert found == [], (
        "code branches on DistributedType; read a fact from the run's description (AcceleratorState().run) "
        f"or ask the strategy, and leave the mapping to backends/resolve.py: {found}"
    )
