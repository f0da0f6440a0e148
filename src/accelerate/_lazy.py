"""PEP 562 lazy exports: a package names its public objects; each module loads on first use.

Keeps ``import accelerate`` (and the CLI's start-up) free of torch until something needs it.
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: the CLI starts without it
    from collections.abc import Callable
    from typing import Any


def lazy_exports(package: str, table: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, loading ``name`` from ``table[name]``."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(module)
        # A table entry naming the submodule itself (``"rich": "accelerate.rich"``) exports the module.
        value = loaded if module == f"{package}.{name}" else getattr(loaded, name)
        setattr(sys.modules[package], name, value)  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
