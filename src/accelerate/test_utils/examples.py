"""Checks that a feature example script and a complete example script stay in step.

An examples folder often holds one plain script, one script per feature (the plain script plus that
feature's code) and a complete script with every feature. :func:`compare_against_test` lists the
lines of a feature script's function that the complete script lacks, so a test can assert that
every feature's code also made it into the complete script.
"""

from __future__ import annotations

import os


def clean_lines(lines: list[str]) -> list[str]:
    """``lines`` without indentation, line endings, blank lines and comment-only lines."""
    cleaned = []
    for line in lines:
        text = line.strip()
        if text and not text.startswith("#"):
            cleaned.append(text)
    return cleaned


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def get_function_contents_by_name(lines: list[str], name: str) -> list[str]:
    """The lines of the body of function ``name`` in ``lines`` (a file's lines, as ``readlines()`` gives).

    The body is every line after the ``def`` line that is blank or indented deeper than it, up to
    the first line that is not; trailing blank lines are dropped.

    Raises:
        ValueError: no ``def name(`` in ``lines``.
    """
    start = None
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith((f"def {name}(", f"async def {name}(")):
            start = i
            break
    if start is None:
        raise ValueError(f"no function named {name!r} found (looked for a line starting with 'def {name}(')")
    depth = _indent(lines[start])
    body: list[str] = []
    for line in lines[start + 1 :]:
        if line.strip() and _indent(line) <= depth:
            break
        body.append(line)
    while body and not body[-1].strip():
        body.pop()
    return body


def _function_lines(filename: str | os.PathLike[str], name: str) -> list[str]:
    with open(filename, encoding="utf-8") as handle:
        lines = handle.readlines()
    try:
        return clean_lines(get_function_contents_by_name(lines, name))
    except ValueError as exc:
        raise ValueError(f"{os.fspath(filename)}: {exc}") from exc


def compare_against_test(
    base_filename: str | os.PathLike[str],
    feature_filename: str | os.PathLike[str],
    parser_only: bool,
    secondary_filename: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Lines of the feature script's function that the base script's same function does not contain.

    Args:
        base_filename: the complete example, expected to hold every feature's code.
        feature_filename: one feature's example.
        parser_only: compare the ``main`` functions (argument parsing) instead of ``training_function``.
        secondary_filename: the plain example the feature script was written from; lines it shares
            with the feature script are boilerplate, not the feature, and are not reported.

    Returns:
        The missing lines (stripped of indentation), in the feature script's order; empty when the
        base script has all of the feature's code.
    """
    function = "main" if parser_only else "training_function"
    base = set(_function_lines(base_filename, function))
    shared = set(_function_lines(secondary_filename, function)) if secondary_filename is not None else set()
    return [
        line
        for line in _function_lines(feature_filename, function)
        if line not in base and line not in shared
    ]
