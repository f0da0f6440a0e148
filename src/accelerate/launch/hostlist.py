"""Slurm's compressed host lists (``gpu[01-03,07],cpu5``), expanded without Slurm installed.

:mod:`accelerate.launch.cluster` reads the first host of a job's node list as machine 0's address.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

MAX_HOSTS = 100_000  # a host list longer than any cluster: a typo such as [1-9999999], not a job


class HostListError(ValueError):
    """A Slurm host list (``gpu[01-03,07],cpu5``) that cannot be expanded."""


def expand_hostlist(text: str) -> list[str]:
    """Every host of a Slurm host list, in order: ``"gpu[01-03,07],cpu5"`` gives ``gpu01, gpu02,
    gpu03, gpu07, cpu5``.

    A bracket holds numbers and ranges; a range keeps the width of its first bound (``[08-10]`` gives
    ``08, 09, 10``). Several brackets in one name combine (``r[1-2]n[1-2]`` gives four hosts).

    Raises:
        HostListError: unbalanced or nested brackets, a range that is not ``LOW-HIGH`` with
            ``LOW <= HIGH``, an empty list, or more than ``MAX_HOSTS`` hosts.
    """
    hosts: list[str] = []
    for token in _split_top_level(text):
        hosts.extend(_expand_token(token, text))
        if len(hosts) > MAX_HOSTS:
            raise HostListError(f"host list {text!r} names more than {MAX_HOSTS} hosts; is a range mistyped?")
    if not hosts:
        raise HostListError(f"host list {text!r} names no host.")
    return hosts


def _split_top_level(text: str) -> list[str]:
    """Splits at the commas outside brackets (those inside separate numbers, not hosts)."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text.strip():
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostListError(f"host list {text!r} nests brackets; Slurm's syntax does not.")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostListError(f"host list {text!r} closes a bracket it never opened.")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise HostListError(f"host list {text!r} leaves a bracket open.")
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def _expand_token(token: str, text: str) -> list[str]:
    start = token.find("[")
    if start < 0:
        return [token]
    end = token.index("]", start)  # balanced: checked by _split_top_level
    prefix, body, rest = token[:start], token[start + 1 : end], token[end + 1 :]
    tails = _expand_token(rest, text)
    return [prefix + item + tail for item in _bracket_items(body, text) for tail in tails]


def _bracket_items(body: str, text: str) -> list[str]:
    items: list[str] = []
    for part in body.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise HostListError(
                f"host list {text!r}: [{body}] must hold numbers and LOW-HIGH ranges, not {part.strip()!r}."
            )
        if not dash:
            items.append(low)
            continue
        if int(low) > int(high):
            raise HostListError(f"host list {text!r}: range {part.strip()} runs backwards.")
        if int(high) - int(low) >= MAX_HOSTS:
            raise HostListError(f"host list {text!r}: range {part.strip()} is longer than any cluster.")
        items.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return items


def slurm_hosts(nodelist: str, *, which: Callable[[str], str | None] | None = None) -> list[str]:
    """The hosts of a Slurm node list: expanded here; by ``scontrol show hostnames`` where this
    expansion rejects the syntax and scontrol is installed (a newer Slurm's syntax, say)."""
    try:
        return expand_hostlist(nodelist)
    except HostListError as exc:
        error = exc
    scontrol = (which or shutil.which)("scontrol")
    if scontrol is not None:
        try:
            out = subprocess.run(
                [scontrol, "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            out = None
        if out is not None and out.returncode == 0 and out.stdout.split():
            return out.stdout.split()
    raise HostListError(
        f"{error} (scontrol {'could not read it either' if scontrol else 'is not installed'})"
    )
