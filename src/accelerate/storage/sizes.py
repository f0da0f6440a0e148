"""Human-readable sizes such as ``max_shard_size="10GB"``."""

from __future__ import annotations

import re

# Decimal units follow the Hugging Face convention ("10GB" == 10**9 bytes); the *iB units are binary.
_UNITS: dict[str, int] = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(size: int | str) -> int:
    """Returns ``size`` in bytes.

    Args:
        size: a positive number of bytes, or a string such as ``"10GB"``, ``"500MB"``, ``"1GiB"``,
            ``"1.5GB"`` or ``"4096"`` (units are case-insensitive; GB = 10**9, GiB = 2**30).

    Example:
        >>> parse_size("500MB")
        500000000
    """
    if isinstance(size, bool):  # bool is an int subclass; True bytes is surely a mistake
        raise TypeError(f"size must be an int or a string like '10GB', got {size!r}")
    if isinstance(size, int):
        value = size
    elif isinstance(size, str):
        match = _SIZE.match(size)
        unit = match.group(2).upper() if match else None
        if match is None or unit not in _UNITS:
            raise ValueError(
                f"Cannot read the size {size!r}: use a number of bytes or a number with a unit "
                f"({', '.join(u for u in _UNITS if u)}), e.g. '10GB', '500MB' or '1GiB'."
            )
        value = int(float(match.group(1)) * _UNITS[unit])
    else:
        raise TypeError(f"size must be an int or a string like '10GB', got {type(size).__name__}: {size!r}")
    if value <= 0:
        raise ValueError(f"size must be positive, got {size!r}")
    return value
