"""Guards for the layering in ARCHITECTURE.md (issue 24): each fails with the file and line that broke it.

Modules stay small; ``checkpointing/`` knows no backend (it asks ``Strategy.checkpoint_io()``, see
checkpointing/checkpoint_io.py), so it neither imports ``accelerate.backends`` nor names FSDP or
DeepSpeed in its code; only ``backends/deepspeed/`` imports ``deepspeed``, and its plugin reads no
environment; and every module imports on its own, so no import cycle hides behind the order in
which the package happens to load its modules.
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


# Where the third-party ``deepspeed`` may be imported: its backend package, and (as ARCHITECTURE.md
# allows) upstream's face module and the resolver. Today only the package does.
_MAY_IMPORT_DEEPSPEED = ("backends/deepspeed/", "utils/deepspeed.py", "backends/resolve.py")


def test_only_the_deepspeed_package_imports_deepspeed() -> None:
    found = [
        f"{_name(path)}:{line}: {module}"
        for path in _modules()
        if not _name(path).startswith(_MAY_IMPORT_DEEPSPEED)
        for line, module in _imported(ast.parse(path.read_text()))
        if module == "deepspeed" or module.startswith("deepspeed.")
    ]
    assert found == [], (
        "deepspeed is imported outside backends/deepspeed/; call accelerate.backends.deepspeed.runtime."
        f"import_deepspeed() or move the code into the package: {found}"
    )


def test_the_deepspeed_plugin_reads_no_environment() -> None:
    """Config dataclasses are pure: the launcher's settings reach DeepSpeedPlugin through
    backends/deepspeed/launch.py (resolve_deepspeed_plugins), never from inside the plugin."""
    path = SRC / "backends" / "deepspeed" / "plugin.py"
    words = {word for _, word in _code_words(ast.parse(path.read_text()))}
    imported = {module for _, module in _imported(ast.parse(path.read_text()))}
    reads = sorted(words & {"environ", "getenv", "read_launch_env"}) + sorted(
        m for m in imported if m == "os" or m.startswith("accelerate.config.env")
    )
    assert reads == [], (
        f"backends/deepspeed/plugin.py reads the environment ({reads}); fill fields in launch.py"
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
