"""Version gates: compare an installed package's (or a given) version against a requirement.

Versions are read from package metadata, so asking about a package never imports it;
``torch_version`` is computed on first access for the same reason.
"""

from __future__ import annotations

import importlib.metadata

from packaging.version import Version, parse

from accelerate.utils.constants import STR_OPERATION_TO_FUNC


class _MissingPackage(importlib.metadata.PackageNotFoundError):
    """PackageNotFoundError (what callers catch) with our whole message instead of its fixed prefix."""

    def __str__(self) -> str:
        return str(self.args[0])


def _installed_version(package: str) -> Version:
    try:
        return parse(importlib.metadata.version(package))
    except importlib.metadata.PackageNotFoundError:
        raise _MissingPackage(
            f"compare_versions: {package!r} is neither a version nor an installed package. "
            f"Pass a version string like '2.4.0', or install it with: pip install {package}"
        ) from None


def compare_versions(library_or_version: str | Version, operation: str, requirement_version: str) -> bool:
    """Whether ``library_or_version`` ``operation`` ``requirement_version`` holds.

    Args:
        library_or_version: an installed package's name (its version is read from metadata), a version
            string, or a ``packaging.version.Version``.
        operation: one of ``>``, ``>=``, ``==``, ``!=``, ``<=``, ``<``.
        requirement_version: the version to compare against.

    Example:
        >>> compare_versions("torch", ">=", "2.0")
        True
    """
    compare = STR_OPERATION_TO_FUNC.get(operation)
    if compare is None:
        raise ValueError(
            f"compare_versions(operation={operation!r}) is not a comparison; use one of "
            f"{', '.join(STR_OPERATION_TO_FUNC)}."
        )
    if isinstance(library_or_version, str):
        # A package name never parses as a version, and a version string is never a package name.
        try:
            current = parse(library_or_version)
        except ValueError:
            current = _installed_version(library_or_version)
    else:
        current = library_or_version
    return bool(compare(current, parse(requirement_version)))


def is_torch_version(operation: str, version: str) -> bool:
    """Whether the installed torch's version ``operation`` ``version`` holds (e.g. ``(">=", "2.4")``)."""
    return compare_versions(_torch_version(), operation, version)


def _torch_version() -> Version:
    return _installed_version("torch")


def __getattr__(name: str) -> object:
    # `torch_version` is a module attribute upstream; computed once, on first use.
    if name == "torch_version":
        value = _torch_version()
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
