"""Guards for the layering in ARCHITECTURE.md (issues 24 and 37): each fails with the file and line that broke it.

Modules stay small; ``checkpointing/`` knows no backend (it asks ``Strategy.checkpoint_io()``, see
checkpointing/checkpoint_io.py), so it neither imports ``accelerate.backends`` nor names FSDP or
DeepSpeed in its code; torch_xla is imported only by the XLA backend and the few modules listed
with their reasons; only ``backends/deepspeed/`` imports ``deepspeed``; no config dataclass reads the environment
(directly or through a helper of its module); ``backends/`` imports neither the facade nor the CLI or launcher,
and no module below ``accelerator.py`` names ``accelerate.accelerator`` in any spelling;
every layer imports only the layers below it (``_LAYERS``; an import edge includes ``TYPE_CHECKING`` imports and
``importlib.import_module`` with a literal name); no code branches on the distributed type or the strategy's name;
``connector.py`` and the run's state modules name no backend (the backend table owns each rule);
only launch/ writes ``ACCELERATE_*`` variables; commands/ imports no torch at start-up; and every module imports
on its own, so no import cycle hides behind the order in which the package happens to load its modules.

Each guard is a function on source text, and a test plants a violation and sees the guard report it.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def _is_dataclass(node: ast.ClassDef) -> bool:
    names = [d.func if isinstance(d, ast.Call) else d for d in node.decorator_list]
    return any(
        (isinstance(d, ast.Name) and d.id == "dataclass")
        or (isinstance(d, ast.Attribute) and d.attr == "dataclass")
        for d in names
    )


# What reads the environment: os.environ / os.getenv / os.putenv, and the env contract's readers.
_ENV_READERS = {
    "environ",
    "getenv",
    "read_launch_env",
    "putenv",
    "_launcher_defaults",
    "parallelism_defaults",
}


def env_reading_dataclasses(source: str) -> list[tuple[int, str, list[str]]]:
    """(line, class, what it reads) for each dataclass whose code reads the environment, directly or
    through a function of the same module that it calls (``__post_init__`` -> ``_defaults()`` ->
    ``os.environ``): one level of indirection, reported as ``helper -> environ``."""
    tree = ast.parse(source)
    helpers = {
        node.name: sorted({word for _, word in _code_words(node)} & _ENV_READERS - {node.name})
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and _is_dataclass(node):
            reads = {word for _, word in _code_words(node)} & _ENV_READERS
            # A helper called (``_defaults()``) or handed over (``field(default_factory=_defaults)``).
            for ref in ast.walk(node):
                if isinstance(ref, ast.Name) and helpers.get(ref.id):
                    reads |= {f"{ref.id} -> {word}" for word in helpers[ref.id]}
            if reads:
                found.append((node.lineno, node.name, sorted(reads)))
    return found


def test_no_config_dataclass_reads_the_environment() -> None:
    """Config objects are pure data (DeepSpeedPlugin, FullyShardedDataParallelPlugin, ParallelismConfig,
    TorchDynamoPlugin, the kwargs handlers...): the launcher's settings reach them through the backend's
    launch translation or the connector, never from inside the class."""
    # The sanctioned exceptions, upstream's observable behaviour: ParallelismConfig() and TorchDynamoPlugin()
    # fill the fields they were not given from the launcher's PARALLELISM_CONFIG_* / ACCELERATE_DYNAMO_*
    # variables when built, read through the env contract (config/env.py).
    allowed = {("ParallelismConfig", "_launcher_defaults"), ("TorchDynamoPlugin", "_launcher_defaults")}
    found = []
    for path in _modules():
        for line, name, reads in env_reading_dataclasses(path.read_text()):
            # A sanctioned reader is sanctioned whichever way the class reaches it.
            reads = [word for word in reads if (name, word.split(" -> ")[0]) not in allowed]
            if reads:
                found.append(f"{_name(path)}:{line}: {name} uses {reads}")
    assert found == [], (
        "a config dataclass reads the environment; fill its unset fields where the run is resolved "
        f"(backends/<name>/launch.py or connector.py) instead: {found}"
    )


_PLANTED_ENV_READS = [
    "import dataclasses, os\n@dataclasses.dataclass\nclass P:\n    x: str = os.environ.get('X', '')\n",
    "import os\nfrom dataclasses import dataclass\n@dataclass\nclass P:\n    x: str = ''\n"
    "    def __post_init__(self):\n        self.x = os.getenv('X') or self.x\n",
    # The spelling: __post_init__ calls a helper of the same module that reads os.environ.
    "import os\nfrom dataclasses import dataclass\n\ndef _defaults():\n    return dict(os.environ)\n\n"
    "@dataclass(frozen=True)\nclass P:\n    x: str = ''\n    def __post_init__(self):\n"
    "        object.__setattr__(self, 'x', _defaults().get('X', self.x))\n",
    "import os\nfrom dataclasses import dataclass, field\n\ndef _x():\n    return os.getenv('X')\n\n"
    "@dataclass\nclass P:\n    x: str = field(default_factory=_x)\n",
]


@pytest.mark.parametrize("source", _PLANTED_ENV_READS)
def test_the_dataclass_guard_sees_a_planted_environment_read(source: str) -> None:
    assert env_reading_dataclasses(source) != [], source


def test_the_dataclass_guard_lets_pure_dataclasses_through() -> None:
    source = (
        "import os\nfrom dataclasses import dataclass\n\ndef _env():\n    return os.environ\n\n"
        "def _double(x):\n    return 2 * x\n\n@dataclass\nclass P:\n    x: int = 1\n"
        "    def __post_init__(self):\n        self.x = _double(self.x)\n"
    )
    assert env_reading_dataclasses(source) == []


# What sits above backends/: the facade, the CLI and the launcher. A strategy gets what it needs from
# them as arguments (the Prepared registry, the objects to prepare), so it can be built and tested alone.
_ABOVE_BACKENDS = (
    "accelerate.accelerator",
    "accelerate.accelerator_checkpoints",
    "accelerate.accelerator_facts",
    "accelerate.connector",
    "accelerate.preparation",
    "accelerate.commands",
    "accelerate.launch",
    "accelerate.launchers",
)


def backend_imports_above(source: str) -> list[tuple[int, str]]:
    """The facade, CLI and launcher modules a backend module's source names: imports at any depth,
    ``if TYPE_CHECKING:`` blocks included (issue 37), and ``importlib.import_module`` / ``__import__``
    with a literal name."""
    return [
        (line, module)
        for line, module in _layer_imports(ast.parse(source))
        if any(module == top or module.startswith(top + ".") for top in _ABOVE_BACKENDS)
    ]


def test_backends_import_nothing_above_them() -> None:
    found = [
        f"{_name(path)}:{line}: {module}"
        for path in sorted((SRC / "backends").rglob("*.py"))
        for line, module in backend_imports_above(path.read_text())
        if (_name(path), module) not in _EDGES_ALLOWED
    ]
    assert found == [], (
        "a backend imports the facade, the CLI or the launcher; pass what it needs in as an argument "
        f"(see backends/registry.py): {found}"
    )


@pytest.mark.parametrize(
    "source",
    [
        'import importlib\nimportlib.import_module("accelerate.accelerator")\n',
        'def f():\n    return __import__("accelerate.launch.plan")\n',
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from accelerate.accelerator import Accelerator\n",
        "from accelerate.commands import launch\n",
        "from accelerate import connector\n",
    ],
)
def test_the_backends_guard_sees_a_planted_import(source: str) -> None:
    assert backend_imports_above(source) != [], source


_IMPORT_ONE_BY_ONE = r"""
import importlib, json, sys, traceback

failed = {}
for name in json.loads(sys.argv[1]):
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
    a cycle shows as a partially initialised module, whichever module starts it. The modules are
    split between two interpreters that run side by side (one would leave a core idle)."""
    names = [_dotted(p) for p in _modules() if p.name != "__main__.py"]
    halves = [names[0::2], names[1::2]]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _IMPORT_ONE_BY_ONE, json.dumps(half)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=SRC.parents[1],
        )  # fmt: skip
        for half in halves
    ]
    failed: dict[str, str] = {}
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err[-4000:]
            failed |= json.loads(out.strip().splitlines()[-1])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert failed == {}, "\n".join(f"{name}:\n{trace}" for name, trace in failed.items())


# --- launch/ is the only writer of ACCELERATE_* variables; commands/ imports no torch at start-up (issue 37)
# Writers outside launch/, each with why (public behaviour of upstream's API, in the user's own process).
_ACCELERATE_ENV_WRITERS = {
    "backends/fsdp/api.py": "upstream's enable_fsdp_ram_efficient_loading() sets ACCELERATE_USE_FSDP and "
    "FSDP_CPU_RAM_EFFICIENT_LOADING for the next Accelerator in the user's process",
}


def _string_constants() -> dict[str, str]:
    """Module-level ``NAME = "..."`` constants of the whole package (how an env variable's name is spelled)."""
    constants = {}
    for path in _modules():
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                constants |= {t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)}
    return constants


def accelerate_env_writes(source: str, constants: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """Where code sets or deletes an ``ACCELERATE_*`` variable in ``os.environ`` (subscript assignment or
    ``del``, ``setdefault``/``pop``/``update``, ``os.putenv``/``os.unsetenv``), the name given as a string
    or as a constant (``constants``: this source's own module-level constants, plus those given)."""
    tree = ast.parse(source)
    known = dict(constants or {})
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            known |= {t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)}

    def accelerate_key(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value.startswith("ACCELERATE_")
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            return str(node.values[0].value).startswith("ACCELERATE_")
        return isinstance(node, ast.Name) and known.get(node.id, "").startswith("ACCELERATE_")

    def is_environ(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
            isinstance(node, ast.Name) and node.id == "environ"
        )

    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        if any(
            isinstance(t, ast.Subscript) and is_environ(t.value) and accelerate_key(t.slice) for t in targets
        ):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, owner = node.func.attr, node.func.value
            keys: list[ast.AST | None] = list(node.args[:1])
            if method == "update":
                keys = [k for arg in node.args if isinstance(arg, ast.Dict) for k in arg.keys]
                keys += [ast.Constant(kw.arg) for kw in node.keywords if kw.arg]
            writes = (is_environ(owner) and method in ("setdefault", "pop", "update", "__setitem__")) or (
                method in ("putenv", "unsetenv")
            )
            if writes and any(accelerate_key(k) for k in keys):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_only_the_launcher_writes_accelerate_variables() -> None:
    """The launcher writes the child's env contract (ARCHITECTURE.md); the runtime only reads it."""
    constants = _string_constants()
    found = [
        f"{_name(path)}:{line}: {text}"
        for path in _modules()
        if _layer_of(_name(path)) != "launch" and _name(path) not in _ACCELERATE_ENV_WRITERS
        for line, text in accelerate_env_writes(path.read_text(), constants)
    ]
    assert found == [], (
        "an ACCELERATE_* variable is written outside launch/; build the child's env in the launch plan "
        f"(launch/), or pass the setting as an argument in this process: {found}"
    )


def test_the_env_writer_exceptions_still_write() -> None:
    constants = _string_constants()
    stale = [
        name
        for name in _ACCELERATE_ENV_WRITERS
        if not accelerate_env_writes((SRC / name).read_text(), constants)
    ]
    assert stale == [], f"these modules no longer write ACCELERATE_* variables; remove them: {stale}"


@pytest.mark.parametrize(
    "source",
    [
        'import os\nos.environ["ACCELERATE_MIXED_PRECISION"] = "bf16"\n',
        'import os\n_KEY = "ACCELERATE_USE_FSDP"\nos.environ.setdefault(_KEY, "true")\n',
        'from os import environ\ndef f():\n    environ.update({"ACCELERATE_DEBUG_MODE": "1"})\n',
        'import os\nos.environ.update(ACCELERATE_USE_CPU="1")\n',
        'import os\ndel os.environ["ACCELERATE_USE_CPU"]\n',
        'import os\nos.putenv(f"ACCELERATE_{name}", "1")\n',
    ],
)
def test_the_env_writer_guard_sees_a_planted_write(source: str) -> None:
    assert accelerate_env_writes(source) != [], source


def test_the_env_writer_guard_lets_reads_and_other_variables_through() -> None:
    source = 'import os\nx = os.environ.get("ACCELERATE_USE_CPU")\nos.environ["XLA_USE_BF16"] = "1"\n'
    assert accelerate_env_writes(source) == []


def commands_start_up_torch(source: str) -> list[tuple[int, str]]:
    """``torch`` imports that run when a commands/ module is imported: at module level, outside functions
    and ``if TYPE_CHECKING:`` blocks (a subcommand imports torch when it runs, not when the CLI starts)."""
    found: list[tuple[int, str]] = []

    def visit(stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.Import):
                found.extend((stmt.lineno, a.name) for a in stmt.names if a.name.split(".")[0] == "torch")
            elif isinstance(stmt, ast.ImportFrom) and (stmt.module or "").split(".")[0] == "torch":
                found.append((stmt.lineno, str(stmt.module)))
            elif isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
                visit(stmt.orelse)
            elif isinstance(stmt, ast.If | ast.Try | ast.With | ast.ClassDef):
                for block in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, block, []))
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(source).body)
    return found


def test_commands_import_no_torch_at_start_up() -> None:
    found = [
        f"{_name(path)}:{line}: {module}"
        for path in sorted((SRC / "commands").rglob("*.py"))
        for line, module in commands_start_up_torch(path.read_text())
    ]
    assert found == [], (
        f"a commands/ module imports torch when imported; import it inside the subcommand: {found}"
    )


@pytest.mark.parametrize(
    "source",
    [
        "import torch\n",
        "from torch.distributed import run\n",
        "try:\n    import torch.cuda\nexcept ImportError:\n    pass\n",
        "class C:\n    import torch\n",
    ],
)
def test_the_commands_guard_sees_a_planted_torch_import(source: str) -> None:
    assert commands_start_up_torch(source) != [], source


def test_the_commands_guard_lets_lazy_torch_through() -> None:
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\ndef f():\n    import torch\n"
    )
    assert commands_start_up_torch(source) == []


# torch_xla (the third-party package) is the XLA backend's: imported only inside backends/xla/, and in the
# modules below, each for a reason the layering gives (see the story in accelerate/backends/xla/__init__.py).
_TORCH_XLA_IMPORTERS = {
    # Environment detection: device, ordinal and world size from torch_xla's runtime, and the
    # communicator PartialState binds, before any strategy exists (state/ must not import backends/).
    "state/xla.py": "detection, placement and XLACommunicator",
    # Below the backends: XlaCheckpointIO and upstream's strategy-less utils.save copy XLA tensors to
    # CPU before writing (as xm.save does).
    "utils/xla.py": "sync() and xla_to_cpu() for checkpoint files",
    # Upstream's probe is_torch_xla_available(check_is_tpu=...) asks torch_xla's runtime for its device.
    "utils/imports.py": "is_torch_xla_available(check_is_tpu/check_is_gpu)",
    # Launcher machinery: the processes that call torch_xla's multiprocessing spawn.
    "launch/xla_spawn.py": "the child of `accelerate launch --tpu` calls xmp.spawn",
    "launch/xla_notebook.py": "notebook_launcher's forked xmp.spawn",
}


def test_torch_xla_is_imported_only_by_the_xla_backend() -> None:
    found = [
        f"{_name(path)}:{line}: {module}"
        for path in _modules()
        if not _name(path).startswith("backends/xla/") and _name(path) not in _TORCH_XLA_IMPORTERS
        for line, module in _imported(ast.parse(path.read_text()))
        if module == "torch_xla" or module.startswith("torch_xla.")
    ]
    assert found == [], (
        "torch_xla is imported outside the XLA backend; move the code into accelerate/backends/xla/ (or ask "
        f"an object the shared code already has), or list the module with its reason here: {found}"
    )


def test_the_torch_xla_exceptions_still_import_it() -> None:
    """An exception that no longer imports torch_xla is dropped from the list, so the list stays honest."""
    stale = [
        name
        for name in _TORCH_XLA_IMPORTERS
        if not any(
            module == "torch_xla" or module.startswith("torch_xla.")
            for _, module in _imported(ast.parse((SRC / name).read_text()))
        )
    ]
    assert stale == [], (
        f"these modules no longer import torch_xla; remove them from _TORCH_XLA_IMPORTERS: {stale}"
    )


# Files are written by storage/ and checkpointing/ without knowing XLA: a strategy's CheckpointIO.host_copy
# copies device tensors first (backends/xla/checkpoint_io.py). The one exception has no strategy to ask.
_XLA_IN_CHECKPOINTING = {
    "checkpointing/single_file.py": "upstream's strategy-less utils.save copies as xm.save"
}


def test_checkpointing_and_storage_name_no_xla() -> None:
    found = [
        _name(path)
        for path in _modules()
        if _name(path).split("/")[0] in ("checkpointing", "storage")
        and _name(path) not in _XLA_IN_CHECKPOINTING
        and "xla" in path.read_text().lower()
    ]
    assert found == [], (
        "checkpointing/ or storage/ names XLA; give the strategy's CheckpointIO a hook instead "
        f"(backends/xla/checkpoint_io.py): {found}"
    )


# --- utils/ is a namespace; the lower layers import nothing above them (issue 24) ----------------------
# The bottom of the layering, lowest first. Each package may import itself and the ones before it,
# plus ``accelerate._lazy`` (the lazy-export helper every face uses). ``collectives`` sits above
# ``config`` (the communicator reads the launcher's debug settings) and below ``state`` (which binds
# the communicator and waits in collectives); ``diagnostics`` (the hang watchdog) imports only utils.
_LOW_LAYERS = ("utils", "diagnostics", "config", "collectives", "state")

# Modules that still import upward, each with the reason and who moves it. Temporary: delete the entry
# when the module moves (the guard then holds for whatever replaces it).
_UPWARD_ALLOWED = {}


def _layer_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """Every accelerate module an import names, at any depth, and literal ``importlib.import_module``
    arguments (an import by another spelling)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return [(line, name) for line, name in found if name == "accelerate" or name.startswith("accelerate.")]


def _upward(package: str) -> list[str]:
    allowed = {*_LOW_LAYERS[: _LOW_LAYERS.index(package) + 1], "_lazy"}
    found = []
    for path in sorted((SRC / package).rglob("*.py")):
        if _name(path) in _UPWARD_ALLOWED:
            continue
        for line, module in _layer_imports(ast.parse(path.read_text())):
            # `from accelerate import utils` names the package through its alias: the second part decides.
            top = module.split(".")[1] if "." in module else ""
            if top not in allowed:
                found.append(f"{_name(path)}:{line}: {module}")
    return found


def test_utils_imports_nothing_above_it() -> None:
    """utils/ holds upstream's paths as lazy faces and generic helpers: neither imports a higher package.

    A face names its homes as strings (``lazy_exports``); a helper that needs the process state, the
    collectives or the CLI is logic of that higher package and moves there, leaving a lazy face.
    """
    found = _upward("utils")
    assert found == [], (
        "utils/ imports a higher package; move the logic to the package it needs and re-export it "
        f"from utils lazily (accelerate._lazy.lazy_exports with the home's module path): {found}"
    )


def _is_pure_face(tree: ast.Module) -> bool:
    """A module that defines nothing of its own and re-exports through ``lazy_exports``."""
    defines = any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) for node in tree.body
    )
    lazy = any(isinstance(node, ast.Name) and node.id == "lazy_exports" for node in ast.walk(tree))
    return lazy and not defines


def test_pure_utils_faces_import_only_the_lazy_helper() -> None:
    """A pure face loads nothing when imported: its homes are strings, each an existing module."""
    eager, unknown = [], []
    for path in sorted((SRC / "utils").rglob("*.py")):
        tree = ast.parse(path.read_text())
        if _name(path) in _UPWARD_ALLOWED or not _is_pure_face(tree):
            continue
        eager += [
            f"{_name(path)}:{line}: {module}"
            for line, module in _layer_imports(tree)
            if not module.startswith("accelerate._lazy")
        ]
        homes = {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(r"accelerate(\.\w+)+", node.value)
        }
        for home in sorted(homes):
            relative = Path(*home.split(".")[1:])
            if not (
                (SRC / relative).with_suffix(".py").is_file() or (SRC / relative / "__init__.py").is_file()
            ):
                unknown.append(f"{_name(path)}: {home}")
    assert eager == [], (
        f"a lazy face imports eagerly; name the home in its lazy_exports table instead: {eager}"
    )
    assert unknown == [], (
        f"a lazy face names a module that does not exist (moved?); point it at the home: {unknown}"
    )


def test_lower_layers_import_nothing_above_them() -> None:
    """diagnostics < config < collectives < state: each imports only itself, the layers below and utils."""
    found = [line for package in _LOW_LAYERS[1:] for line in _upward(package)]
    assert found == [], (
        f"a low layer imports a higher one (order, lowest first: {', '.join(_LOW_LAYERS)}); pass what it "
        f"needs down as an argument, or move the code up to the package it needs: {found}"
    )


# Modules allowed to branch on the distributed type, each with why.
_MAY_BRANCH_ON_TYPE = {
    "backends/resolve.py": "the resolver: the one place that maps settings to a strategy and its type",
    "state/distributed_type.py": "the type's own definition: device -> type, and the multi-device types",
    # A launch config file's `distributed_type:` key is a string the launcher reads, not the run's type.
    "launch/plan.py": "reads the config file's distributed_type key (which flags it implies)",
    "launch/checks.py": "reads the config file's distributed_type key (types this build cannot run)",
    "launch/xla.py": "reads the config file's distributed_type key (XLA asked for)",
    "backends/fsdp/launch.py": "reads the config file's distributed_type key (FSDP section in use)",
    "backends/deepspeed/launch.py": "reads the config file's distributed_type key (DeepSpeed section in use)",
    "commands/launch_helpers.py": "PrepareForLaunch's distributed_type argument, upstream's launcher-side string",
}


def _strategy_names() -> set[str]:
    """The strategies' names (``name = "fsdp"`` in a class body under backends/)."""
    names = set()
    for path in sorted((SRC / "backends").rglob("*.py")):
        for cls in ast.walk(ast.parse(path.read_text())):
            if isinstance(cls, ast.ClassDef):
                names |= {
                    stmt.value.value
                    for stmt in cls.body
                    if isinstance(stmt, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "name" for t in stmt.targets)
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                }
    return names


def _type_words() -> set[str]:
    """Strings that spell a backend: DistributedType's member names and values, and the strategies' names."""
    from accelerate.state.distributed_type import DistributedType

    members = {m.name for m in DistributedType} | {str(m.value) for m in DistributedType}
    return {word.lower() for word in members | _strategy_names()}


def _type_kind(node: ast.AST) -> str | None:
    """``"type"`` for a run's distributed type (``distributed_type``, ``x.distributed_type``, with or without
    ``.name`` / ``.value``), ``"strategy name"`` for a strategy's ``.name`` / ``.value`` / ``type(s).__name__``,
    ``"strategy"`` for a bare ``strategy`` / ``x.strategy`` (a run's strategy name, or a local of another
    meaning such as FSDP's sharding strategy: only a string literal beside it is a branch); else None."""
    named = isinstance(node, ast.Attribute) and node.attr in ("name", "value", "__name__")
    if named:
        assert isinstance(node, ast.Attribute)
        node = node.value
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "type"
            and node.args
        ):
            node = node.args[0]
    word = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
    if word == "distributed_type":
        return "type"
    if word == "strategy":
        return "strategy name" if named else "strategy"
    return None


def _is_type_value(node: ast.AST) -> bool:
    return _type_kind(node) is not None


def _names_member(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "DistributedType"
        for n in ast.walk(node)
    )


def branching_on_type(source: str, words: set[str] | None = None) -> list[tuple[int, str]]:
    """Where code branches on the distributed type or the strategy's identity:

    - a comparison (==, !=, in, is ...) naming a ``DistributedType.<member>``;
    - a run's type or strategy (``distributed_type``, ``strategy``, their ``.name``/``.value``) compared
      with a string or a named collection (``state.distributed_type.value == "FSDP"``,
      ``strategy.name == "fsdp"``, ``run.strategy == "parallel"``);
    - any ``.name``/``.value`` compared with a string that spells a backend (``dt.name == "XLA"``);
    - a ``match`` whose subject is a run's type or strategy, or whose cases name a ``DistributedType`` member.
    """
    words = _type_words() if words is None else words

    def is_vocabulary(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) or (isinstance(node, ast.Constant) and isinstance(node.value, str))

    def spells_backend(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in words

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            kinds = {_type_kind(s) for s in sides}
            others = [s for s in sides if not _is_type_value(s)]
            typed = (bool(kinds & {"type", "strategy name"}) and any(is_vocabulary(s) for s in others)) or (
                "strategy" in kinds
                and any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in others)
            )
            named = any(isinstance(s, ast.Attribute) and s.attr in ("name", "value") for s in sides) and any(
                spells_backend(s) for s in sides
            )
            if typed or named or any(_names_member(s) for s in sides):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Match) and (
            _is_type_value(node.subject) or any(_names_member(case.pattern) for case in node.cases)
        ):
            found.append((node.lineno, f"match {ast.unparse(node.subject)}"))
    return found


def test_no_branching_on_distributed_type_outside_the_resolver() -> None:
    """``DistributedType`` is for users to read: library code asks the run's description or the strategy
    (a capability such as ``Strategy.composes_parallelism``), never which backend it is."""
    words = _type_words()
    found = [
        f"{_name(path)}:{line}: {text}"
        for path in _modules()
        if _name(path) not in _MAY_BRANCH_ON_TYPE
        for line, text in branching_on_type(path.read_text(), words)
    ]
    assert found == [], (
        "code branches on DistributedType; read a fact from the run's description (AcceleratorState().run) "
        f"or ask the strategy, and leave the mapping to backends/resolve.py: {found}"
    )


@pytest.mark.parametrize(
    "source",
    [
        'if state.distributed_type.value == "FSDP":\n    pass\n',
        'if state.distributed_type.name == "XLA":\n    pass\n',
        'if dt.name == "XLA":\n    pass\n',
        'if strategy.name == "fsdp":\n    pass\n',
        'if self.strategy.name != "deepspeed":\n    pass\n',
        'if self.state.run.strategy == "parallel":\n    pass\n',
        'if type(strategy).__name__ == "FSDPStrategy":\n    pass\n',
        "if state.distributed_type == DistributedType.FSDP:\n    pass\n",
        "if state.distributed_type in SHARDED_TYPES:\n    pass\n",
        "x = DistributedType.XLA is distributed_type\n",
        "match state.distributed_type:\n    case _:\n        pass\n",
        "match self.strategy.name:\n    case 'fsdp':\n        pass\n",
        "match kind:\n    case DistributedType.DEEPSPEED:\n        pass\n",
    ],
)
def test_the_branching_guard_sees_a_planted_branch(source: str) -> None:
    assert branching_on_type(source) != [], source


@pytest.mark.parametrize(
    "source",
    [
        "if self.state.run.composes_parallelism:\n    pass\n",
        'if param.name == "weight":\n    pass\n',
        'if sharding_strategy == "FULL_SHARD":\n    pass\n',
        "if strategy not in _RESHARD:\n    pass\n",
        "match size:\n    case 1:\n        pass\n",
    ],
)
def test_the_branching_guard_lets_capabilities_through(source: str) -> None:
    assert branching_on_type(source) == [], source


# --- every layer of ARCHITECTURE.md, by import edge (issue 37) -----------------------------------------
# An import edge is any statement that names an accelerate module: ``import``/``from ... import`` at any
# depth, ``importlib.import_module("accelerate.x")`` / ``__import__("accelerate.x")`` with a literal name,
# and imports inside ``if TYPE_CHECKING:`` blocks. TYPE_CHECKING imports count: the layering is about which
# modules a module knows, and "no module below the facade names accelerate.accelerator" holds for
# annotations too (an annotation-only edge is still the edge a refactor must remove; see _EDGES_ALLOWED).
#
# The layers, top first, and the modules each holds (a package or a root module, by dotted path below
# ``accelerate``). A module may import its own layer, every layer below it, and ``accelerate._lazy``.
# Two places where the code taught the map something (ARCHITECTURE.md lists them the other way round):
# - optimizer.py/scheduler.py sit below backends/: backend wrappers (DeepSpeed, Megatron-LM) subclass
#   AcceleratedOptimizer/AcceleratedScheduler at run time; optimizer.py types the strategy it calls
#   with its own Protocol (StepHook), not Strategy.
# - the facade's delegates (accelerator_checkpoints, accelerator_facts, connector, preparation) and
#   local_sgd are a layer below accelerator.py: they are handed the objects, not the facade.
# - storage/ (crash-safe files) sits below checkpointing/ and big_modeling/, which both build on it, and
#   above state/: its writer threads stop with the process through state/teardown.py.
_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("package", ("__init__", "test_utils")),  # the package root and the test helpers: above everything
    ("faces", ("data_loader", "hooks", "inference", "parallelism_config")),  # upstream's lazy root faces
    ("commands", ("commands",)),
    ("launch", ("launch", "launchers")),
    ("facade", ("accelerator",)),
    (
        "facade delegates",
        ("accelerator_checkpoints", "accelerator_facts", "connector", "preparation", "local_sgd"),
    ),
    ("planning", ("planning",)),  # the memory estimate and the plan checker: the launcher and CLI ask it
    ("backends", ("backends",)),
    ("optimizer/scheduler", ("optimizer", "scheduler")),
    ("precision", ("precision",)),
    ("data", ("data",)),
    ("checkpointing", ("checkpointing",)),
    ("big_modeling", ("big_modeling",)),
    ("tracking", ("tracking",)),
    ("storage", ("storage",)),
    ("state", ("state", "logging", "progress")),
    ("collectives", ("collectives",)),
    ("config", ("config",)),
    ("diagnostics", ("diagnostics",)),
    ("utils", ("utils", "_lazy", "profiling", "rich")),
)
_RANK = {layer: rank for rank, (layer, _) in enumerate(_LAYERS)}
# Names `from accelerate import X` may take that load nothing: package metadata set before any submodule.
_PACKAGE_CONSTANTS = {"accelerate.__version__"}

# Edges that break the layering for a while, each with what must change. Empty since issue 37 removed the
# last ones; the list can only shrink: test_the_allowed_edges_still_exist fails on an entry whose edge is gone.
_EDGES_ALLOWED: dict[tuple[str, str], str] = {}


def _module_path(dotted: str) -> str:
    """``accelerate.a.b`` -> ``a/b`` (the module's place below the package)."""
    return "/".join(dotted.split(".")[1:])


def _layer_of(path: str) -> str:
    """The layer of a module given as ``a/b`` or ``a/b.py``; names that are no module are the package root's."""
    path = path.removesuffix(".py").removesuffix("/__init__") or "__init__"
    for layer, homes in _LAYERS:
        if any(path == home or path.startswith(home + "/") for home in homes):
            return layer
    return "package"


def layer_violations(source: str, name: str) -> list[tuple[int, str]]:
    """The import edges of module ``name`` (``a/b.py`` below accelerate/) that point up the layers."""
    rank = _RANK[_layer_of(name)]
    return [
        (line, module)
        for line, module in _layer_imports(ast.parse(source))
        if module not in _PACKAGE_CONSTANTS and _RANK[_layer_of(_module_path(module))] < rank
    ]


def _tree_violations() -> list[tuple[str, int, str]]:
    return [
        (_name(path), line, module)
        for path in _modules()
        for line, module in layer_violations(path.read_text(), _name(path))
    ]


def test_every_module_has_a_layer() -> None:
    """A new root module or package is placed in _LAYERS (else it would silently be the package root's)."""
    homeless = [
        _name(p)
        for p in _modules()
        if _layer_of(_name(p)) == "package"
        and _name(p) != "__init__.py"
        and not _name(p).startswith("test_utils/")
    ]
    assert homeless == [], f"modules with no layer; add them to _LAYERS: {homeless}"


def test_imports_point_down_the_layers() -> None:
    found = [
        f"{name}:{line}: {module} ({_layer_of(name)} -> {_layer_of(_module_path(module))})"
        for name, line, module in _tree_violations()
        if (name, module) not in _EDGES_ALLOWED
    ]
    assert found == [], (
        "an import points up the layers (top first: " + ", ".join(layer for layer, _ in _LAYERS) + "); "
        f"pass what the module needs down as an argument, or move the code up to the layer it needs: {found}"
    )


def test_the_allowed_edges_still_exist() -> None:
    """An allow-list entry whose edge is gone is deleted, so the list only shrinks."""
    present = {(name, module) for name, _, module in _tree_violations()}
    stale = sorted(set(_EDGES_ALLOWED) - present)
    assert stale == [], f"these edges are gone; remove them from _EDGES_ALLOWED: {stale}"


@pytest.mark.parametrize(
    ("name", "source"),
    [
        # The planted spellings, one per layer rule they break.
        ("backends/x.py", 'import importlib\nimportlib.import_module("accelerate.accelerator")\n'),
        ("backends/x.py", '__import__("accelerate.commands.launch")\n'),
        ("data/x.py", "from accelerate.accelerator import Accelerator\n"),
        ("checkpointing/x.py", "from accelerate.accelerator import Accelerator\n"),
        ("data/x.py", "from accelerate import Accelerator\n"),
        ("tracking/x.py", "from accelerate.commands import launch\n"),
        (
            "tracking/x.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from accelerate.accelerator import Accelerator\n",
        ),
        # One per layer: the layer imports the one just above it (or the facade).
        ("commands/x.py", "import accelerate.test_utils\n"),
        ("launch/x.py", "from accelerate.commands.env import env_command\n"),
        ("launchers.py", "from accelerate import commands\n"),
        ("accelerator.py", "from accelerate.launch.plan import LaunchPlan\n"),
        ("connector.py", "import accelerate.accelerator\n"),
        ("backends/fsdp/x.py", "from accelerate.connector import connect\n"),
        ("optimizer.py", "def f():\n    from accelerate.backends.registry import object_kind\n"),
        ("precision/x.py", "from accelerate.scheduler import AcceleratedScheduler\n"),
        ("data/x.py", "from accelerate.precision.amp import Precision\n"),
        ("checkpointing/x.py", "from accelerate.data.resume import skip_first_batches\n"),
        ("big_modeling/x.py", "from accelerate.checkpointing.project import rotate\n"),
        ("tracking/x.py", "from accelerate.big_modeling import init_empty_weights\n"),
        ("storage/x.py", "from accelerate.tracking import GeneralTracker\n"),
        ("storage/x.py", "from accelerate.checkpointing.rng import capture_rng_state\n"),
        ("state/x.py", "from accelerate.storage.atomic import AtomicCheckpoint\n"),
        ("state/x.py", "from accelerate.tracking import GeneralTracker\n"),
        ("logging.py", "from accelerate.tracking import GeneralTracker\n"),
        ("collectives/x.py", "from accelerate.state import PartialState\n"),
        ("config/x.py", "from accelerate.collectives import gather\n"),
        ("diagnostics/x.py", "from accelerate.config.env import read_launch_env\n"),
        ("utils/x.py", "from accelerate.diagnostics.watchdog import Watchdog\n"),
        ("_lazy.py", "from accelerate.hooks import ModelHook\n"),
    ],
)
def test_the_layer_guard_sees_a_planted_upward_import(name: str, source: str) -> None:
    assert layer_violations(source, name) != [], f"{name} importing upward was not seen"


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("backends/x.py", "from accelerate.state import PartialState\nimport accelerate.utils\n"),
        ("accelerator.py", "from accelerate.backends.resolve import resolve\n"),
        ("storage/atomic.py", "from accelerate import __version__\n"),
        ("utils/x.py", 'from accelerate._lazy import lazy_exports\nimportlib.import_module("torch")\n'),
        ("data/x.py", "from accelerate.data.samplers import BatchSamplerShard\n"),
    ],
)
def test_the_layer_guard_lets_downward_imports_through(name: str, source: str) -> None:
    assert layer_violations(source, name) == []


# --- nothing below the facade names it (issue 37) --------------------------------------------------
# A module under accelerator.py (its delegates included) gets the values it needs as arguments (a
# strategy a PrepareContext, trackers the log_with list, LocalSGD a Protocol of what it calls), so no
# module below names the facade, not even for an annotation (checkpointing gets frozen records of the
# training objects).
_FACADE = "accelerate.accelerator"


def _names_facade(name: str) -> bool:
    """``accelerate.accelerator`` (and what it defines), or the package's lazy ``accelerate.Accelerator``."""
    return name in (_FACADE, "accelerate.Accelerator") or name.startswith(_FACADE + ".")


def facade_names(source: str) -> list[tuple[int, str]]:
    """Where ``source`` names the facade module, in any spelling: ``import`` / ``from ... import`` at any
    depth (``if TYPE_CHECKING:`` blocks included), ``importlib.import_module`` / ``__import__`` or any other
    string in the code (``sys.modules["accelerate.accelerator"]``; docstrings are documentation), and the
    attribute ``accelerate.accelerator`` / ``accelerate.Accelerator`` of the imported package."""
    tree = ast.parse(source)
    found = [(line, module) for line, module in _layer_imports(tree) if _names_facade(module)]
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if _names_facade(node.value):
                found.append((node.lineno, node.value))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            dotted = f"{node.value.id}.{node.attr}"
            if _names_facade(dotted):
                found.append((node.lineno, dotted))
    return sorted(set(found))


def _below_the_facade() -> list[Path]:
    rank = _RANK["facade"]
    return [path for path in _modules() if _RANK[_layer_of(_name(path))] > rank]


def test_nothing_below_the_facade_names_it() -> None:
    found = [
        f"{_name(path)}:{line}: {spelling}"
        for path in _below_the_facade()
        for line, spelling in facade_names(path.read_text())
        if (_name(path), spelling) not in _EDGES_ALLOWED
    ]
    assert found == [], (
        "a module below accelerator.py names the facade; take the values it needs as arguments (see "
        "backends/base.py's PrepareContext, preparation.Preparers) or type the parameter with a Protocol "
        f"of what it calls (local_sgd.LocalSGDHost): {found}"
    )


def test_the_facade_guard_covers_every_layer_below_it() -> None:
    """The delegates, backends and the low layers are all checked; the facade itself and above are not."""
    checked = {_layer_of(_name(path)) for path in _below_the_facade()}
    below = {layer for layer, rank in _RANK.items() if rank > _RANK["facade"]}
    assert checked == below and "facade delegates" in checked and "facade" not in checked


_FACADE_SPELLINGS = [
    "from accelerate.accelerator import Accelerator\n",
    "import accelerate.accelerator\n",
    "import accelerate.accelerator as facade\n",
    "from accelerate import Accelerator\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from accelerate.accelerator import Accelerator\n",
    "def f():\n    from accelerate.accelerator import Accelerator\n    return Accelerator\n",
    'import importlib\nimportlib.import_module("accelerate.accelerator")\n',
    'facade = __import__("accelerate.accelerator")\n',
    'import sys\nfacade = sys.modules.get("accelerate.accelerator")\n',
    "import accelerate\ndef f():\n    return accelerate.Accelerator()\n",
]


@pytest.mark.parametrize(
    "name", ["preparation.py", "local_sgd.py", "backends/deepspeed/x.py", "tracking/x.py"]
)
@pytest.mark.parametrize("source", _FACADE_SPELLINGS)
def test_the_facade_guard_sees_a_planted_name(name: str, source: str) -> None:
    assert facade_names(source) != [], source
    # The layer guard sees the import spellings too (a string in sys.modules is this guard's alone).
    if "sys.modules" not in source and "accelerate.Accelerator()" not in source:
        assert layer_violations(source, name) != [], (name, source)


@pytest.mark.parametrize(
    "source",
    [
        "from accelerate.accelerator_facts import AcceleratorFacts\n",
        "import accelerate.accelerator_checkpoints\n",
        'def f():\n    """Called by :class:`accelerate.accelerator.Accelerator`."""\n',
        "# from accelerate.accelerator import Accelerator\nx = 1\n",
        "from accelerate.backends.base import PrepareContext\n",
    ],
)
def test_the_facade_guard_lets_other_names_through(source: str) -> None:
    assert facade_names(source) == [], source


# ----------------------------------------------------------------- the backend table (issue 37)
# connect() names no backend at all; the run's description and the AcceleratorState hold upstream's
# attribute and keyword names (fsdp_plugin, deepspeed_plugins) but no backend rule: a message or a
# value naming a backend belongs in its row. XLA stays a device type that state/ detects.
_CONNECT_WORDS = re.compile(r"fsdp|deepspeed|megatron|xla", re.IGNORECASE)
_STATE_WORDS = re.compile(r"fsdp|deepspeed|megatron", re.IGNORECASE)
# The backend packages and one-module backends (the rows' homes), which the seam may not import.
_BACKEND_PACKAGES = {
    "deepspeed",
    "fsdp",
    "parallel",
    "pipeline",
    "xla",
    "ddp",
    "megatron_lm",
    "single_device",
}
_STATE_SEAM = ("state/run.py", "state/accelerator_state.py", "state/parallelism_env.py")


def backend_names_in(source: str, words: re.Pattern[str], *, identifiers: bool) -> list[tuple[int, str]]:
    """Where ``source`` names a backend in its code (comments and docstrings are free).

    With ``identifiers`` every name, keyword and string counts, and any import of a backend package.
    Without, only strings count that are not a keyword or attribute name (``"deepspeed_plugins"``),
    outside functions named after the backend (upstream's ``select_deepspeed_plugin`` speaks of it).
    """
    tree = ast.parse(source)
    found = [
        (line, module)
        for line, module in _imported(tree)
        if module.startswith("accelerate.backends.") and module.split(".")[2] in _BACKEND_PACKAGES
    ]
    if identifiers:
        return found + [(line, word) for line, word in _code_words(tree) if words.search(word)]
    skip = _docstrings(tree)
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) and words.search(function.name):
            skip |= {id(node) for node in ast.walk(function)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in skip:
            continue
        keyword = node.value.isidentifier() and "_" in node.value
        if words.search(node.value) and not keyword:
            found.append((node.lineno, node.value))
    return found


def test_connect_and_the_run_state_name_no_backend() -> None:
    found = [f"connector.py:{line}: {word!r}" for line, word in backend_names_in(
        (SRC / "connector.py").read_text(), _CONNECT_WORDS, identifiers=True)]  # fmt: skip
    for name in _STATE_SEAM:
        found += [f"{name}:{line}: {word!r}" for line, word in backend_names_in(
            (SRC / name).read_text(), _STATE_WORDS, identifiers=False)]  # fmt: skip
    assert found == [], (
        "the resolution seam names a backend; move the rule into the backend's row (backends/table.py "
        f"and its package's spec) and pass the arguments through by name: {found}"
    )


@pytest.mark.parametrize(
    ("source", "identifiers"),
    [
        ("from accelerate.backends.fsdp.spec import resolve_fsdp_plugin\n", True),
        ("def connect(*, deepspeed_plugin=None):\n    return deepspeed_plugin\n", True),
        ("def f(x):\n    return x == 'xla'\n", True),
        ("def f():\n    raise ValueError('fsdp_plugin and deepspeed_plugin cannot run together')\n", False),
        ("def f(kind):\n    return kind == 'deepspeed'\n", False),
    ],
)
def test_the_backend_name_guard_sees_a_planted_name(source: str, identifiers: bool) -> None:
    assert backend_names_in(source, _CONNECT_WORDS, identifiers=identifiers)


def test_the_backend_name_guard_lets_keywords_and_documentation_through() -> None:
    source = (
        '"""Mentions deepspeed and fsdp freely."""\n'
        "def f(kwargs):\n    # fsdp in a comment\n    return kwargs.pop('deepspeed_plugins', None)\n"
        "def select_deepspeed_plugin(name):\n    raise ValueError('no DeepSpeed plugin named ' + name)\n"
    )
    assert backend_names_in(source, _STATE_WORDS, identifiers=False) == []


def test_the_table_imports_only_the_rows_a_run_asks_for() -> None:
    """Resolving on one CPU process with no plugin loads the single-device row and no other backend."""
    probe = (
        "import sys, json\n"
        "from accelerate.backends.resolve import backend_request, resolve_plugins, resolve_strategy\n"
        "from accelerate.config.env import read_launch_env\n"
        "from accelerate.state import PartialState\n"
        "plugins = resolve_plugins(backend_request({}, read_launch_env({})))\n"
        "strategy = resolve_strategy(PartialState(cpu=True), plugins=plugins)\n"
        "print(json.dumps([strategy.name, plugins, sorted(m for m in sys.modules if m.startswith('accelerate.backends.'))]))"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("ACCELERATE_", "FSDP_"))}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    name, plugins, loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (name, plugins) == ("single_device", {})
    rows = {"deepspeed", "fsdp", "parallel", "xla", "ddp", "megatron_lm", "pipeline"}
    assert [m for m in loaded if m.split(".")[2] in rows] == []


def test_every_table_row_exports_a_spec() -> None:
    from accelerate.backends.spec import BackendSpec
    from accelerate.backends.table import TABLE

    assert TABLE[-1].name == "single_device" and TABLE[-1].is_device_row
    for row in TABLE:
        assert isinstance(row.spec(), BackendSpec), row.name
